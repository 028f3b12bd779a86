// Kernels of the Mamba (selective state-space) layers: the short causal convolution and the
// selective-scan recurrence. Both run one token after the other in a fixed per-token order, so a
// token's outputs and the state after it are the same bits however the tokens were split into calls
// (one call, chunks, one token at a time): no chunk-dependent parallel scan. Threads split channels or
// heads, never a reduction. Every ISA gives the scalar reference's bits (tests/unit/ssm_test.cpp): the
// products and sums below are rounded one by one as written (no FMA), exp is exp_f32 (backends/cpu/exp/exp_f32.h)
// and the one reduction (over d_state) has a fixed lane order.
#pragma once

#include <cstdint>

#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {

class ThreadPool;

// Depthwise causal convolution of `channels` channels with d_conv taps, then bias and SiLU.
struct SsmConvArgs {
    int64_t n_tokens = 0;
    int64_t channels = 0;
    int64_t d_conv = 0;  // taps, >= 2
    // (d_conv - 1) × channels: the inputs of the d_conv - 1 tokens before the first one, oldest row first
    // (zeros at the start of a sequence). Updated in place to the last d_conv - 1 inputs.
    float* window = nullptr;
    const float* x = nullptr;  // n_tokens rows of `channels` inputs, row stride x_stride
    int64_t x_stride = 0;
    // channels × d_conv (GGUF `ssm_conv1d.weight`): channel c's taps at weight[c * d_conv + k], k = 0
    // multiplying the oldest input of the window.
    const float* weight = nullptr;
    const float* bias = nullptr;  // channels, or null for none
    float* out = nullptr;         // n_tokens rows, stride out_stride; must not overlap x or window
    int64_t out_stride = 0;
};

// out[t][c] = silu(acc), acc = in(t - d_conv + 1)[c] · w[c][0]; then acc = acc + in(t - d_conv + 1 + k)[c] ·
// w[c][k] for k = 1 .. d_conv - 1 (in k order); then acc = acc + bias[c]. in(i) is x row i for i >= 0
// and a window row before that. silu(a) = a / (1 + exp_f32(-a)) (as activation.h's swiglu computes it).
void ssm_conv(const SsmConvArgs& args, ThreadPool* pool);
void ssm_conv_with(Isa isa, const SsmConvArgs& args, ThreadPool* pool);

// The selective scan. Mamba-1: n_head = d_inner channels of head_dim 1, A per (channel, state),
// n_group 1. Mamba-2: n_head heads of head_dim channels, one scalar A per head, B and C shared by the
// heads of a group.
struct SsmScanArgs {
    int64_t n_tokens = 0;
    int64_t n_head = 0;
    int64_t head_dim = 0;
    int64_t d_state = 0;
    int64_t n_group = 0;           // divides n_head; head h uses group h / (n_head / n_group)
    bool per_state_decay = false;  // true: A is n_head × d_state (Mamba-1); false: A is n_head (Mamba-2)
    float* state = nullptr;        // n_head × head_dim × d_state, updated in place
    const float* x = nullptr;      // n_tokens rows of n_head × head_dim, stride x_stride
    int64_t x_stride = 0;
    const float* dt = nullptr;  // n_tokens rows of n_head (time step before softplus, bias added), stride dt_stride
    int64_t dt_stride = 0;
    const float* A = nullptr;  // GGUF `ssm_a` (= -exp(A_log)): see per_state_decay
    const float* B = nullptr;  // n_tokens rows of n_group × d_state, stride B_stride
    int64_t B_stride = 0;
    const float* C = nullptr;  // the same shape, stride C_stride
    int64_t C_stride = 0;
    const float* D = nullptr;  // n_head skip weights, or null for none
    float* y = nullptr;        // n_tokens rows of n_head × head_dim, stride y_stride; may alias x (same stride)
    int64_t y_stride = 0;
};

// For each token t (in order), head h, channel i of the head, with g = h's group:
//   dts = softplus(dt[t][h]) = dt > 20 ? dt : log1p(exp_f32(dt))       (std::log1p; scalar on every ISA)
//   xdt = x[t][h][i] · dts
//   for s < d_state:  dA = exp_f32(dts · a) with a = A[h][s] (per_state_decay) or A[h]
//                     state[h][i][s] = state[h][i][s] · dA + B[t][g][s] · xdt
//   y[t][h][i] = Σ_s state[h][i][s] · C[t][g][s], then + x[t][h][i] · D[h]
// The sum over s: 16 partial sums p[j] = Σ_{s ≡ j mod 16} in increasing s (each product rounded, then
// added), combined as q[j] = p[j] + p[j + 8] (j < 8), r[j] = q[j] + q[j + 4] (j < 4), u[j] = r[j] + r[j + 2]
// (j < 2), sum = u[0] + u[1].
void ssm_scan(const SsmScanArgs& args, ThreadPool* pool);
void ssm_scan_with(Isa isa, const SsmScanArgs& args, ThreadPool* pool);

namespace kernels {
// Each ISA's part of a call: the conv of channels [channel_begin, channel_end) (outputs and window), the
// scan of heads [head_begin, head_end) (state and y). Arguments checked by ssm_conv / ssm_scan.
namespace reference {
void ssm_conv(const SsmConvArgs& args, int64_t channel_begin, int64_t channel_end);
void ssm_scan(const SsmScanArgs& args, int64_t head_begin, int64_t head_end);
}  // namespace reference
void ssm_conv_avx2(const SsmConvArgs& args, int64_t channel_begin, int64_t channel_end);
void ssm_scan_avx2(const SsmScanArgs& args, int64_t head_begin, int64_t head_end);
void ssm_conv_avx512(const SsmConvArgs& args, int64_t channel_begin, int64_t channel_end);
void ssm_scan_avx512(const SsmScanArgs& args, int64_t head_begin, int64_t head_end);
void ssm_conv_neon(const SsmConvArgs& args, int64_t channel_begin, int64_t channel_end);  // aarch64 (ssm_neon.cpp)
void ssm_scan_neon(const SsmScanArgs& args, int64_t head_begin, int64_t head_end);

// Shared by every ISA (compiled once, for the baseline, so every path calls the same code):
// softplus(dt) as above (std::log1p of exp_f32); the same given exp_dt = exp_f32(dt) (a SIMD path's
// exps of several heads at once); and the window update of a conv call for channels
// [channel_begin, channel_end): row j becomes in(n_tokens - d_conv + 1 + j), after the outputs are made.
float ssm_softplus(float dt);
float ssm_softplus_given_exp(float dt, float exp_dt);
void ssm_conv_update_window(const SsmConvArgs& args, int64_t channel_begin, int64_t channel_end);
}  // namespace kernels

}  // namespace kvstash
