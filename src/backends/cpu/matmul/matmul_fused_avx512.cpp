// AVX-512 matmul, fused tile (few tokens: decode steps and a few sequences batched): each weight block is
// decoded in registers (matmul_avx512_blocks.h) and multiplied straight into the accumulators; several
// rows at once, for memory-level parallelism. Bitwise the buffered tiles' results (matmul_avx512.cpp,
// where the reduction order of every output is given).
#pragma GCC optimize("fp-contract=off")  // decode arithmetic exactly as written, never fused implicitly

#include "backends/cpu/matmul/matmul_avx512_blocks.h"

namespace kvstash::kernels {
namespace {

constexpr int kFusedRows = 4;              // rows decoded together in the fused tile for 2 or 3 tokens
                                           // (Block::kRowsOneToken for one token)
constexpr int kFusedMaxTokens = 3;         // n_tokens up to this run the fused tile at once
constexpr int64_t kPrefetchBytes = 16384;  // least distance of the weight prefetch (bytes)

// ---- fused tile: NR rows × NT tokens, weights decoded in registers ----

// y[j * y_stride + i] = dot(row i, x + j * cols); row i starts at w + i * row_bytes.
template <class Block, int NR, int NT>
void fused_tile(const uint8_t* w, uint64_t row_bytes, const float* x, int64_t cols, float* y, int64_t y_stride) {
    const int64_t n_blocks = cols / Block::kElems;
    alignas(64) float scales[NR][Block::kGroup * Block::kScales];
    __m512 acc[NR][NT];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
    // Decode streams the weights from memory once, and a tile's compute is shorter than a DRAM access:
    // each row's block is prefetched (into L2) `ahead` bytes before it is used: the same position one
    // tile later for long rows, several tiles later for short ones. (The rows of a tile are consecutive,
    // so the tiles of a task form one contiguous stream.)
    const int64_t ahead = std::max<int64_t>(kPrefetchBytes, static_cast<int64_t>(NR * row_bytes));
    // A group of blocks at a time: the scales of all NR rows, then the products.
    for (int64_t g = 0; g < n_blocks; g += Block::kGroup) {
        const int64_t n_group = std::min<int64_t>(Block::kGroup, n_blocks - g);
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i) Block::prepare(w + i * row_bytes + g * Block::kBytes, n_group, scales[i]);
        for (int64_t b = 0; b < n_group; ++b) {
            const float* xb = x + (g + b) * Block::kElems;
            for_steps(std::make_integer_sequence<int, Block::kSteps>{}, [&](auto step) {
                // This step's activation chunks, loaded once for all rows.
                constexpr int c0 = step.value * Block::kStepChunks;
                __m512 xs[NT][Block::kStepChunks];
#pragma GCC unroll 16
                for (int j = 0; j < NT; ++j)
#pragma GCC unroll 16
                    for (int c = 0; c < Block::kStepChunks; ++c)
                        xs[j][c] = _mm512_loadu_ps(xb + j * cols + 16 * (c0 + c));
#pragma GCC unroll 16
                for (int i = 0; i < NR; ++i) {
                    const uint8_t* src = w + i * row_bytes + (g + b) * Block::kBytes;
                    if (Block::kBytes > 64 || step.value == 0) {  // a line per 64 bytes of block, at least one
                        _mm_prefetch(reinterpret_cast<const char*>(src) + ahead + 64 * step.value, _MM_HINT_T0);
                    }
                    Block::template step<step.value>(src, scales[i] + b * Block::kScales, [&](int c, __m512 wv) {
#pragma GCC unroll 16
                        for (int j = 0; j < NT; ++j) {
                            acc[i][j] = _mm512_fmadd_ps(wv, xs[j][c - c0], acc[i][j]);
                        }
                    });
                }
            });
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) y[j * y_stride + i] = hsum16(acc[i][j]);
}

using FusedFn = void (*)(const uint8_t*, uint64_t, const float*, int64_t, float*, int64_t);

template <class Block, int NT>
FusedFn fused_tile_for_rows(int nr) {
    switch (nr) {
        case 1: return &fused_tile<Block, 1, NT>;
        case 2: return &fused_tile<Block, 2, NT>;
        case 3: return &fused_tile<Block, 3, NT>;
        case 4: return &fused_tile<Block, 4, NT>;
        case 5: return &fused_tile<Block, 5, NT>;
        case 6: return &fused_tile<Block, 6, NT>;
        case 7: return &fused_tile<Block, 7, NT>;
        default: return &fused_tile<Block, 8, NT>;
    }
}

template <class Block>
FusedFn fused_tile_for(int nr, int nt) {
    static_assert(kFusedMaxTokens == 3);
    switch (nt) {
        case 1: return fused_tile_for_rows<Block, 1>(nr);
        case 2: return fused_tile_for_rows<Block, 2>(std::min(nr, 4));
        default: return fused_tile_for_rows<Block, 3>(std::min(nr, 4));
    }
}

template <class Block>
void fused_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const int nt = static_cast<int>(a.n_tokens);
    const int tile_rows = nt == 1 ? Block::kRowsOneToken : kFusedRows;
    const FusedFn full = fused_tile_for<Block>(tile_rows, nt);
    int64_t r = row_begin;
    for (; r + tile_rows <= row_end; r += tile_rows) {
        full(a.W + static_cast<uint64_t>(r) * a.row_bytes, a.row_bytes, a.X, a.cols, a.Y + r, a.y_stride);
    }
    if (r < row_end) {
        fused_tile_for<Block>(static_cast<int>(row_end - r), nt)(a.W + static_cast<uint64_t>(r) * a.row_bytes,
                                                                 a.row_bytes, a.X, a.cols, a.Y + r, a.y_stride);
    }
}

void run_fused(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    switch (a.type) {
        case TensorType::Q8_0: fused_rows<Q8_0>(a, row_begin, row_end); return;
        case TensorType::Q4_0: fused_rows<Q4_0>(a, row_begin, row_end); return;
        case TensorType::Q4_1: fused_rows<Q4_1>(a, row_begin, row_end); return;
        case TensorType::Q4_K: fused_rows<Q45_K<false>>(a, row_begin, row_end); return;
        case TensorType::Q5_K: fused_rows<Q45_K<true>>(a, row_begin, row_end); return;
        case TensorType::Q6_K: fused_rows<Q6_K>(a, row_begin, row_end); return;
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: return;  // the buffered tiles (matmul_avx512.cpp)
    }
}

}  // namespace

void matmul_rows_fused_avx512(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    // Up to 3 tokens (decode) the fused tile at once; a few more (continuous batching of a few
    // sequences) in chunks of up to 3, the task's rows re-read from L2 per chunk, which beats
    // decoding them into the buffer (its decode is amortized only over many tokens). Same bits.
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kFusedMaxTokens) {
        MatmulArgs chunk = a;
        chunk.X = a.X + t0 * a.cols;
        chunk.Y = a.Y + t0 * a.y_stride;
        chunk.n_tokens = std::min<int64_t>(kFusedMaxTokens, a.n_tokens - t0);
        run_fused(chunk, row_begin, row_end);
    }
}

}  // namespace kvstash::kernels
