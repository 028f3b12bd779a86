// The Mamba kernels (backends/cpu/ssm/ssm.h) on the process's or a given ISA: argument checks, then channels
// (conv) or heads (scan) split over the pool. Each channel / head is one task's alone, so the split
// never changes a result.
#include "backends/cpu/ssm/ssm.h"

#include <algorithm>
#include <string>

#include "backends/cpu/runtime/thread_pool.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

// Below this many multiply-adds (or exps) a task costs less than waking a worker (a few microseconds).
constexpr int64_t kMinWorkPerTask = 16384;
constexpr int64_t kConvChannelBlock = 16;  // a task's channels: whole vectors on every ISA
constexpr int64_t kHeadBlock = 16;

[[noreturn]] void invalid(const std::string& what, const std::string& advice) {
    throw Error(ErrorCode::invalid_argument, what + ": " + advice);
}

void require_pointer(const void* p, const char* kernel, const char* name) {
    if (!p) invalid(std::string(kernel) + ": " + name + " is null", "pass the buffer");
}

// A buffer of `rows` rows of `width` floats with row stride `stride`: the stride is only read between
// rows, so a single row may pass any stride.
void require_stride(int64_t rows, int64_t width, int64_t stride, const char* kernel, const char* name) {
    if (rows > 1 && stride < width) {
        invalid(std::string(kernel) + ": " + name + " stride " + std::to_string(stride) + " is below its row width " +
                    std::to_string(width),
                "rows must not overlap");
    }
}

// Whether two buffers of rows × width floats (row strides given) share memory, first row to last.
bool spans_overlap(const float* a, int64_t a_rows, int64_t a_width, int64_t a_stride, const float* b, int64_t b_rows,
                   int64_t b_width, int64_t b_stride) {
    if (a_rows <= 0 || b_rows <= 0 || a_width <= 0 || b_width <= 0) return false;
    const float* a_end = a + (a_rows - 1) * a_stride + a_width;
    const float* b_end = b + (b_rows - 1) * b_stride + b_width;
    return a < b_end && b < a_end;
}

void check_isa(Isa isa) {
    if (!cpu_supports(isa)) {
        invalid(std::string("ssm: this CPU does not run the ") + isa_name(isa) + " kernels",
                "pick one of available_isas()");
    }
}

void check(const SsmConvArgs& a) {
    const char* k = "ssm_conv";
    if (a.n_tokens < 0 || a.channels < 0) {
        invalid(std::string(k) + ": n_tokens " + std::to_string(a.n_tokens) + " and channels " +
                    std::to_string(a.channels) + " must not be negative",
                "pass the batch's sizes");
    }
    if (a.d_conv < 2) {
        invalid(std::string(k) + ": d_conv " + std::to_string(a.d_conv) + " is below 2",
                "the convolution needs at least one earlier input (GGUF ssm.conv_kernel)");
    }
    require_pointer(a.window, k, "window");
    require_pointer(a.x, k, "x");
    require_pointer(a.weight, k, "weight");
    require_pointer(a.out, k, "out");
    require_stride(a.n_tokens, a.channels, a.x_stride, k, "x");
    require_stride(a.n_tokens, a.channels, a.out_stride, k, "out");
    if (spans_overlap(a.out, a.n_tokens, a.channels, a.out_stride, a.x, a.n_tokens, a.channels, a.x_stride) ||
        spans_overlap(a.out, a.n_tokens, a.channels, a.out_stride, a.window, a.d_conv - 1, a.channels, a.channels)) {
        invalid(std::string(k) + ": out overlaps x or the window", "write the outputs to a separate buffer");
    }
}

void check(const SsmScanArgs& a) {
    const char* k = "ssm_scan";
    if (a.n_tokens < 0)
        invalid(std::string(k) + ": n_tokens " + std::to_string(a.n_tokens) + " is negative", "pass the batch's size");
    if (a.n_head < 1 || a.head_dim < 1 || a.d_state < 1 || a.n_group < 1) {
        invalid(std::string(k) + ": n_head " + std::to_string(a.n_head) + ", head_dim " + std::to_string(a.head_dim) +
                    ", d_state " + std::to_string(a.d_state) + ", n_group " + std::to_string(a.n_group),
                "each must be at least 1");
    }
    if (a.n_head % a.n_group != 0) {
        invalid(std::string(k) + ": n_group " + std::to_string(a.n_group) + " does not divide n_head " +
                    std::to_string(a.n_head),
                "each group must hold the same number of heads (GGUF ssm.group_count)");
    }
    require_pointer(a.state, k, "state");
    require_pointer(a.x, k, "x");
    require_pointer(a.dt, k, "dt");
    require_pointer(a.A, k, "A");
    require_pointer(a.B, k, "B");
    require_pointer(a.C, k, "C");
    require_pointer(a.y, k, "y");
    const int64_t width = a.n_head * a.head_dim;
    require_stride(a.n_tokens, width, a.x_stride, k, "x");
    require_stride(a.n_tokens, a.n_head, a.dt_stride, k, "dt");
    require_stride(a.n_tokens, a.n_group * a.d_state, a.B_stride, k, "B");
    require_stride(a.n_tokens, a.n_group * a.d_state, a.C_stride, k, "C");
    require_stride(a.n_tokens, width, a.y_stride, k, "y");
    const bool same_rows = a.y == a.x && (a.y_stride == a.x_stride || a.n_tokens <= 1);
    if (!same_rows && spans_overlap(a.y, a.n_tokens, width, a.y_stride, a.x, a.n_tokens, width, a.x_stride)) {
        invalid(std::string(k) + ": y overlaps x without being x itself (same pointer and stride)",
                "write y over x exactly or to a separate buffer");
    }
    if (spans_overlap(a.y, a.n_tokens, width, a.y_stride, a.state, 1, width * a.d_state, 0)) {
        invalid(std::string(k) + ": y overlaps the state", "write y to a separate buffer");
    }
}

// Runs fn(begin, end) over [0, n) in blocks of `per_task`, on the pool when there is more than one block.
template <typename Fn>
void split(int64_t n, int64_t per_task, ThreadPool* pool, const Fn& fn) {
    const int64_t n_tasks = (n + per_task - 1) / per_task;
    if (!pool || pool->n_threads() <= 1 || n_tasks <= 1) {
        fn(int64_t{0}, n);
        return;
    }
    pool->run(n_tasks, [&](int64_t task) { fn(task * per_task, std::min(n, (task + 1) * per_task)); });
}

}  // namespace

void ssm_conv_with(Isa isa, const SsmConvArgs& args, ThreadPool* pool) {
    check_isa(isa);
    check(args);
    if (args.channels == 0 || args.n_tokens == 0) return;
    const auto conv = kernels::kernel_table(isa).ssm_conv;
    // Work per channel: n_tokens outputs of d_conv products and one exp, each.
    const int64_t per_channel = std::max<int64_t>(1, args.n_tokens * (args.d_conv + 8));
    int64_t per_task = (kMinWorkPerTask + per_channel - 1) / per_channel;
    per_task = (per_task + kConvChannelBlock - 1) / kConvChannelBlock * kConvChannelBlock;
    split(args.channels, per_task, pool, [&](int64_t begin, int64_t end) { conv(args, begin, end); });
}

void ssm_scan_with(Isa isa, const SsmScanArgs& args, ThreadPool* pool) {
    check_isa(isa);
    check(args);
    if (args.n_tokens == 0) return;
    const auto scan = kernels::kernel_table(isa).ssm_scan;
    // Work per head: a softplus per token, then head_dim × d_state updates (and d_state exps per channel
    // for Mamba-1). Mamba-1's heads are single channels, so a task takes a block of them.
    const int64_t per_head = args.n_tokens * (32 + args.head_dim * args.d_state * (args.per_state_decay ? 8 : 1));
    int64_t per_task = std::max<int64_t>(1, (kMinWorkPerTask + per_head - 1) / per_head);
    // Whole blocks of heads where a task has several (the vector ISAs take the softplus exps 16 heads at once).
    if (per_task > kHeadBlock) per_task = (per_task + kHeadBlock - 1) / kHeadBlock * kHeadBlock;
    split(args.n_head, per_task, pool, [&](int64_t begin, int64_t end) { scan(args, begin, end); });
}

void ssm_conv(const SsmConvArgs& args, ThreadPool* pool) { ssm_conv_with(active_isa(), args, pool); }

void ssm_scan(const SsmScanArgs& args, ThreadPool* pool) { ssm_scan_with(active_isa(), args, pool); }

}  // namespace kvstash
