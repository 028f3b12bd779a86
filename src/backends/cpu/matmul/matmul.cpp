// matmul / dot_row: argument checks, ISA dispatch, and the split of output rows across threads.
#include "backends/cpu/matmul/matmul.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/matmul/chunk_shares.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

kernels::MatmulRowsFn rows_kernel(Isa isa, bool integer, TensorType type) {
    if (!cpu_supports(isa)) {
        throw Error(ErrorCode::invalid_argument,
                    std::string("matmul: this CPU does not support the ") + isa_name(isa) + " path");
    }
    if (type == kTensorTypeQ5_0 && !integer) {
        throw Error(ErrorCode::unsupported, std::string("matmul: q5_0 is computed with integer activations only, which "
                                                        "the ") +
                                                isa_name(isa) + " path does not use for it");
    }
    // The integer kernels of every path compute the same bits (reference/matmul_int8_ref.cpp). q5_0 has
    // no AVX-512 kernel: the AVX2 one (an AVX-512 CPU runs AVX2).
    if (type == kTensorTypeQ5_0 && isa == Isa::avx512) isa = Isa::avx2;
    const kernels::KernelTable& table = kernels::kernel_table(isa);
    return integer ? table.matmul_int8_rows : table.matmul_rows;
}

void check_shape(TensorType type, int64_t rows, int64_t cols, int64_t n_tokens) {
    // q5_0: where integer activations are used for it (rows_kernel checks; backends/cpu/matmul/quantize_act.h).
    if (!is_supported_tensor_type(static_cast<uint32_t>(type)) && type != kTensorTypeQ5_0) {
        throw Error(ErrorCode::unsupported,
                    "matmul: weight type " + tensor_type_name(static_cast<uint32_t>(type)) + " is not supported");
    }
    const uint32_t block = tensor_type_traits(type).block_size;
    if (rows < 0 || n_tokens < 0 || cols < 0 || cols % block != 0) {
        throw Error(ErrorCode::invalid_argument,
                    "matmul: bad shape (rows " + std::to_string(rows) + ", cols " + std::to_string(cols) + ", tokens " +
                        std::to_string(n_tokens) + "); cols must be a multiple of the " +
                        tensor_type_traits(type).name + " block size " + std::to_string(block));
    }
}

// Rows per task: enough tasks for dynamic balancing (about 4 per thread), each a whole number of
// `group`-row groups so that kernels run full tiles (16, or 32 for repacked weights, whose tiles are 32 rows from row
// 0: a range cut inside one multiplies the whole tile). The split never changes a result.
int64_t rows_per_task(int64_t rows, int n_threads, int64_t group) {
    if (n_threads <= 1) return rows;
    const int64_t target = (rows + 4 * n_threads - 1) / (4 * n_threads);
    return std::max<int64_t>(group, (target + group - 1) / group * group);
}

// Decode (up to kShareTokensMax tokens) reads every weight once from memory and is bound by that. The rows of
// all operands, in order, are cut into chunks (whole 16-row groups) and into one contiguous share of equal bytes
// per thread (backends/cpu/matmul/chunk_shares.h): each thread streams its own share, its kernels prefetching across
// chunk boundaries up to the end of the range it holds, and at the end of the run takes back halves of the others'
// remaining chunks. Chunks: about 1/16 of a thread's share, within [16 KiB, 256 KiB] of weights (the end of a
// run is balanced to one chunk; measured on Gemma 3 decode, 32 KiB chunks everywhere cost more CPU per token
// than 256 KiB ones, docs/benchmarks-history.md). Before: about 4 dynamically handed-out tasks per thread, each
// starting with its prefetch cold, and up to one task (22 MB of the Gemma 3 output matrix) of imbalance.
constexpr int64_t kShareTokensMax = 6;
constexpr int64_t kShareChunksPerThread = 16;
constexpr int64_t kShareChunkMinBytes = 16 * 1024;
constexpr int64_t kShareChunkMaxBytes = 256 * 1024;

// KVSTASH_DECODE_SPLIT=tasks keeps decode on the tasks split (rows_per_task), so that one binary can measure
// both side by side (docs/benchmarks-history.md). Read once.
bool decode_shares_enabled() {
    static const bool enabled = [] {
        const char* split = std::getenv("KVSTASH_DECODE_SPLIT");
        return split == nullptr || std::string(split) != "tasks";
    }();
    return enabled;
}

// Whole `group`-row groups, as rows_per_task.
int64_t share_chunk_rows(int64_t chunk_bytes, uint64_t row_bytes, int64_t group) {
    return std::max<int64_t>(group,
                             static_cast<int64_t>(static_cast<uint64_t>(chunk_bytes) / row_bytes) / group * group);
}

// One operand of a run: its kernel and arguments, cut into tasks (or chunks) of `chunk` rows numbered from
// first_task.
struct Part {
    kernels::MatmulRowsFn kernel;
    kernels::MatmulArgs args;
    int64_t chunk;
    int64_t first_task;
};

// bounds (n_shares + 1): share s = chunks [bounds[s], bounds[s + 1]) of the parts' n_chunks, about equal
// bytes of weights each (the parts' rows in order).
void split_into_shares(const std::vector<Part>& parts, int64_t n_chunks, int n_shares, std::vector<int64_t>& bounds) {
    int64_t total = 0;
    for (const Part& p : parts) total += p.args.y_stride * static_cast<int64_t>(p.args.row_bytes);
    bounds.assign(static_cast<size_t>(n_shares) + 1, n_chunks);
    bounds[0] = 0;
    size_t i = 0;
    int64_t before = 0;  // bytes of parts[0 .. i)
    for (int s = 1; s < n_shares; ++s) {
        const int64_t target = total / n_shares * s + total % n_shares * s / n_shares;
        auto part_bytes = [&](size_t k) {
            return parts[k].args.y_stride * static_cast<int64_t>(parts[k].args.row_bytes);
        };
        while (i + 1 < parts.size() && before + part_bytes(i) <= target) before += part_bytes(i++);
        const Part& p = parts[i];
        const int64_t chunk_bytes = p.chunk * static_cast<int64_t>(p.args.row_bytes);
        const int64_t n_part_chunks = (p.args.y_stride + p.chunk - 1) / p.chunk;
        const int64_t k = std::min(n_part_chunks, (target - before + chunk_bytes / 2) / chunk_bytes);
        bounds[static_cast<size_t>(s)] = std::max(bounds[static_cast<size_t>(s) - 1], p.first_task + k);
    }
}

// Which activations the products use: integer ones for the types matmul_uses_integer_activations names
// (as inference does), or integer ones for every operand (every type must then have an integer path).
enum class Activations { as_inference_does, integer };

// Products of one input X with every operand on `isa`, in one thread-pool run; X quantized once per
// activation block size (32 or 256) where integer activations are used.
void run_products(Isa isa, Activations activations, std::span<const MatmulOperand> operands, int64_t cols,
                  const float* X, int64_t n_tokens, ThreadPool* pool) {
    // The caller's thread_locals, named through references: a thread_local named in the tasks would be
    // each worker's own.
    thread_local std::array<kernels::QuantizedActivations, 2> xq_storage;
    thread_local std::vector<Part> parts_storage;
    std::array<kernels::QuantizedActivations, 2>& xq = xq_storage;
    std::vector<Part>& parts = parts_storage;
    parts.clear();
    std::array<bool, 2> quantized{false, false};
    const int n_threads = pool ? pool->n_threads() : 1;
    // Shares only where every operand runs an integer kernel (they prefetch on across chunks); the f32-activation
    // kernels (SmolLM2's q4_1 on AVX2 before it took integer activations) measured slower with them on the shared
    // machine (docs/benchmarks-history.md).
    bool shares = n_threads > 1 && n_tokens <= kShareTokensMax && decode_shares_enabled();
    for (const MatmulOperand& op : operands) {
        shares = shares && (activations == Activations::integer || matmul_uses_integer_activations(isa, op.type));
    }
    int64_t n_tasks = 0;  // with shares: chunks
    int64_t chunk_bytes = 0;
    if (shares) {
        int64_t total = 0;
        for (const MatmulOperand& op : operands)
            total += op.rows * static_cast<int64_t>(tensor_row_bytes(op.type, cols));
        chunk_bytes = std::clamp(total / (kShareChunksPerThread * n_threads), kShareChunkMinBytes, kShareChunkMaxBytes);
    }
    for (const MatmulOperand& op : operands) {
        const bool integer = activations == Activations::integer || matmul_uses_integer_activations(isa, op.type);
        const kernels::MatmulRowsFn kernel = rows_kernel(isa, integer, op.type);  // throws if the CPU lacks `isa`
        const int64_t group = op.tiles != nullptr ? 32 : 16;                      // rows: whole tiles
        if (op.rows == 0 || n_tokens == 0) continue;
        Part part{kernel,
                  kernels::MatmulArgs{op.type, static_cast<const uint8_t*>(op.W), tensor_row_bytes(op.type, cols), cols,
                                      X, n_tokens, op.Y, op.rows},
                  shares ? share_chunk_rows(chunk_bytes, tensor_row_bytes(op.type, cols), group)
                         : rows_per_task(op.rows, n_threads, group),
                  n_tasks};
        part.args.tiles = static_cast<const uint8_t*>(op.tiles);
        if (integer) {
            const int64_t block = kernels::activation_block(op.type);
            const size_t slot = block == 256 ? 1 : 0;
            if (!quantized[slot]) {
                // Every ISA's quantizer gives the scalar one's bits.
                kernels::quantize_activations(X, n_tokens, cols, block, xq[slot], pool,
                                              kernels::kernel_table(isa).quantize_activation_row);
                quantized[slot] = true;
            }
            part.args.xq = &xq[slot];
        }
        n_tasks += (op.rows + part.chunk - 1) / part.chunk;
        parts.push_back(part);
    }
    auto part_of = [&](int64_t t) -> const Part& {
        size_t i = 0;
        while (i + 1 < parts.size() && parts[i + 1].first_task <= t) ++i;
        return parts[i];
    };
    auto task = [&](int64_t t) {
        const Part& part = part_of(t);
        const int64_t begin = (t - part.first_task) * part.chunk;
        part.kernel(part.args, begin, std::min(part.args.y_stride, begin + part.chunk));
    };
    if (!pool || n_tasks <= 1) {
        for (int64_t t = 0; t < n_tasks; ++t) task(t);
        return;
    }
    if (!shares) {
        pool->run(n_tasks, task);
        return;
    }
    thread_local kernels::ChunkShares shares_storage;
    thread_local std::vector<int64_t> bounds_storage;
    kernels::ChunkShares& chunk_shares = shares_storage;
    std::vector<int64_t>& bounds = bounds_storage;
    split_into_shares(parts, n_tasks, n_threads, bounds);
    chunk_shares.reset(bounds);
    pool->run(n_threads, [&](int64_t s) {
        const int share = static_cast<int>(s);
        chunk_shares.run_share(share, [&](int64_t t, int64_t range_end) {
            const Part& part = part_of(t);
            const int64_t rows = part.args.y_stride;
            const int64_t begin = (t - part.first_task) * part.chunk;
            kernels::MatmulArgs args = part.args;
            // This thread reads on to the end of the range it holds (or of the operand).
            args.prefetch_row_end = std::min(rows, (range_end - part.first_task) * part.chunk);
            part.kernel(args, begin, std::min(rows, begin + part.chunk));
        });
    });
}

}  // namespace

void matmul_shared_input(std::span<const MatmulOperand> operands, int64_t cols, const float* X, int64_t n_tokens,
                         ThreadPool* pool) {
    for (const MatmulOperand& op : operands) check_shape(op.type, op.rows, cols, n_tokens);
    run_products(active_isa(), Activations::as_inference_does, operands, cols, X, n_tokens, pool);
}

void matmul_with(Isa isa, TensorType type, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tokens,
                 float* Y, ThreadPool* pool, const void* tiles) {
    check_shape(type, rows, cols, n_tokens);
    const MatmulOperand op{type, W, rows, Y, tiles};
    run_products(isa, Activations::as_inference_does, {&op, 1}, cols, X, n_tokens, pool);
}

void matmul_integer_with(Isa isa, TensorType type, const void* W, int64_t rows, int64_t cols, const float* X,
                         int64_t n_tokens, float* Y, ThreadPool* pool, const void* tiles) {
    check_shape(type, rows, cols, n_tokens);
    if (!kernels::has_integer_path(type)) {
        throw Error(ErrorCode::invalid_argument,
                    "matmul_integer_with: " + tensor_type_name(static_cast<uint32_t>(type)) +
                        " has no integer-activation path (only block-quantized types)");
    }
    const MatmulOperand op{type, W, rows, Y, tiles};
    run_products(isa, Activations::integer, {&op, 1}, cols, X, n_tokens, pool);
}

float dot_row_with(Isa isa, TensorType type, const void* w_row, const float* x, int64_t cols) {
    float y = 0.0f;
    matmul_with(isa, type, w_row, 1, cols, x, 1, &y, nullptr);
    return y;
}

void matmul(TensorType type, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tokens, float* Y,
            ThreadPool* pool, const void* tiles) {
    check_shape(type, rows, cols, n_tokens);  // report bad arguments before a bad KVSTASH_ISA
    matmul_with(active_isa(), type, W, rows, cols, X, n_tokens, Y, pool, tiles);
}

float dot_row(TensorType type, const void* w_row, const float* x, int64_t cols) {
    return dot_row_with(active_isa(), type, w_row, x, cols);
}

}  // namespace kvstash
