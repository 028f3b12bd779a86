#include "backends/cpu/ssm/mamba_block.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/matmul/project.h"
#include "backends/cpu/norm/norm.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "backends/cpu/ssm/ssm.h"
#include "kv/recurrent_state.h"

namespace kvstash {
namespace {

enum class Part { conv_window, scan_state };

// Copies one part of layer `slot` of `from` into the snapshot.
void take_snapshot(const RecurrentState& from, int64_t slot, Part part, RecurrentState& to) {
    const RecurrentShape& shape = from.shape();
    if (part == Part::conv_window) {
        std::memcpy(to.writable_conv(slot), from.conv(slot), static_cast<size_t>(shape.conv_floats) * sizeof(float));
    } else {
        std::memcpy(to.writable_scan(slot), from.scan(slot), static_cast<size_t>(shape.scan_floats) * sizeof(float));
    }
}

// Runs `step(row_begin, row_end)` over the segment's rows, stopping at each snapshot row to copy the
// part of the layer's state that `step` advances: the kernels are chunking-invariant, so the splits
// change no bit.
template <typename Step>
void run_with_snapshots(const ForwardSegment& seg, int64_t slot, Part part, int64_t count, Step&& step) {
    int64_t done = 0;
    for (const RecurrentSnapshot& snap : seg.snapshots) {
        if (snap.row > done) step(done, snap.row);
        done = std::max(done, snap.row);
        take_snapshot(*seg.recurrent, slot, part, *snap.out);
    }
    if (count > done) step(done, count);
}

// Runs fn(row_begin, row_end) over [0, n_rows) in blocks of rows worth waking a worker for (a few
// thousand floats each), on the pool when there is more than one block.
template <typename Fn>
void for_row_blocks(int64_t n_rows, int64_t row_floats, ThreadPool& pool, const Fn& fn) {
    constexpr int64_t kMinFloatsPerTask = 4096;
    const int64_t per_task = std::max<int64_t>(1, kMinFloatsPerTask / std::max<int64_t>(1, row_floats));
    const int64_t n_tasks = (n_rows + per_task - 1) / per_task;
    if (n_tasks <= 1 || pool.n_threads() <= 1) {
        fn(int64_t{0}, n_rows);
        return;
    }
    pool.run(n_tasks, [&](int64_t task) { fn(task * per_task, std::min(n_rows, (task + 1) * per_task)); });
}

}  // namespace

void MambaScratch::reserve(const SsmConfig& c, int64_t n) {
    if (n <= max_tokens) return;
    max_tokens = n;
    const auto sz = [n](int64_t width) { return static_cast<size_t>(n * width); };
    proj.resize(sz(c.d_in_proj()));
    conv.resize(sz(c.conv_channels()));
    if (!c.mamba2) {
        xdb.resize(sz(c.dt_rank + 2 * c.d_state));
        dt_in.resize(sz(c.dt_rank));
    }
    dt.resize(sz(c.n_head));
    y.resize(sz(c.d_inner));
    if (c.mamba2) yn.resize(sz(c.d_inner));
}

void mamba_block(const ModelImpl& model, int64_t layer, std::span<const ForwardSegment> segments, const float* xn,
                 float* out, MambaScratch& s, ThreadPool& pool) {
    const ModelConfig& mc = model.config;
    const SsmConfig& c = mc.ssm;
    const LayerWeights& l = model.weights.layers[static_cast<size_t>(layer)];
    const int64_t slot = mc.slot[static_cast<size_t>(layer)];
    int64_t n = 0;
    for (const ForwardSegment& seg : segments) n += static_cast<int64_t>(seg.tokens.size());
    s.reserve(c, n);

    const int64_t d_in_proj = c.d_in_proj(), channels = c.conv_channels();
    project(l.ssm_in, xn, n, s.proj.data(), pool);
    // Mamba-1 rows of proj: x (d_inner), z (d_inner). Mamba-2: z (d_inner), x B C (channels), dt (n_head).
    const int64_t conv_in = c.mamba2 ? c.d_inner : 0;
    const int64_t z_at = c.mamba2 ? 0 : c.d_inner;

    // Causal convolution + SiLU, per sequence.
    {
        int64_t row = 0;
        for (const ForwardSegment& seg : segments) {
            const auto count = static_cast<int64_t>(seg.tokens.size());
            run_with_snapshots(seg, slot, Part::conv_window, count, [&](int64_t r0, int64_t r1) {
                SsmConvArgs a;
                a.n_tokens = r1 - r0;
                a.channels = channels;
                a.d_conv = c.d_conv;
                a.window = seg.recurrent->writable_conv(slot);
                a.x = s.proj.data() + (row + r0) * d_in_proj + conv_in;
                a.x_stride = d_in_proj;
                a.weight = l.ssm_conv1d.data();
                a.bias = l.ssm_conv1d_b.empty() ? nullptr : l.ssm_conv1d_b.data();
                a.out = s.conv.data() + (row + r0) * channels;
                a.out_stride = channels;
                ssm_conv(a, &pool);
            });
            row += count;
        }
    }

    // Time steps (before softplus), B and C.
    const float* B = nullptr;
    const float* C = nullptr;
    int64_t bc_stride = 0;
    if (c.mamba2) {
        for (int64_t t = 0; t < n; ++t) {
            const float* dt = s.proj.data() + t * d_in_proj + c.d_inner + channels;
            float* dst = s.dt.data() + t * c.n_head;
            for (int64_t h = 0; h < c.n_head; ++h) dst[h] = dt[h] + l.ssm_dt_b[static_cast<size_t>(h)];
        }
        B = s.conv.data() + c.d_inner;
        C = B + c.n_group * c.d_state;
        bc_stride = channels;
    } else {
        const int64_t width = c.dt_rank + 2 * c.d_state;
        project(l.ssm_x, s.conv.data(), n, s.xdb.data(), pool);
        for (int64_t t = 0; t < n; ++t) {
            std::memcpy(s.dt_in.data() + t * c.dt_rank, s.xdb.data() + t * width,
                        static_cast<size_t>(c.dt_rank) * sizeof(float));
        }
        project(l.ssm_dt, s.dt_in.data(), n, s.dt.data(), pool);
        for (int64_t t = 0; t < n; ++t) {
            float* dst = s.dt.data() + t * c.n_head;
            for (int64_t h = 0; h < c.n_head; ++h) dst[h] += l.ssm_dt_b[static_cast<size_t>(h)];
        }
        B = s.xdb.data() + c.dt_rank;
        C = B + c.d_state;
        bc_stride = width;
    }

    // Selective scan, per sequence.
    {
        int64_t row = 0;
        for (const ForwardSegment& seg : segments) {
            const auto count = static_cast<int64_t>(seg.tokens.size());
            run_with_snapshots(seg, slot, Part::scan_state, count, [&](int64_t r0, int64_t r1) {
                SsmScanArgs a;
                a.n_tokens = r1 - r0;
                a.n_head = c.n_head;
                a.head_dim = c.head_dim;
                a.d_state = c.d_state;
                a.n_group = c.n_group;
                a.per_state_decay = !c.mamba2;
                a.state = seg.recurrent->writable_scan(slot);
                a.x = s.conv.data() + (row + r0) * channels;
                a.x_stride = channels;
                a.dt = s.dt.data() + (row + r0) * c.n_head;
                a.dt_stride = c.n_head;
                a.A = l.ssm_a.data();
                a.B = B + (row + r0) * bc_stride;
                a.B_stride = bc_stride;
                a.C = C + (row + r0) * bc_stride;
                a.C_stride = bc_stride;
                a.D = l.ssm_d.data();
                a.y = s.y.data() + (row + r0) * c.d_inner;
                a.y_stride = c.d_inner;
                ssm_scan(a, &pool);
            });
            row += count;
        }
    }

    // Gate: y · silu(z); Mamba-2 then normalises each group of d_inner / n_group channels. Rows are
    // independent, so blocks of rows go to the pool (each row's arithmetic is the same on any thread).
    const int64_t group = c.mamba2 ? c.d_inner / c.n_group : 0;
    for_row_blocks(n, c.d_inner, pool, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            float* y = s.y.data() + t * c.d_inner;
            swiglu(s.proj.data() + t * d_in_proj + z_at, y, y, c.d_inner);
            for (int64_t g = 0; g < c.n_group && c.mamba2; ++g) {
                const int64_t at = t * c.d_inner + g * group;
                rms_norm_row(s.y.data() + at, l.ssm_norm.data() + g * group, s.yn.data() + at, group, mc.norm_eps);
            }
        }
    });
    const float* mixed = c.mamba2 ? s.yn.data() : s.y.data();
    project(l.ssm_out, mixed, n, out, pool);
}

}  // namespace kvstash
