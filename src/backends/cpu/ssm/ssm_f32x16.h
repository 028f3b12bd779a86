// The Mamba kernels (backends/cpu/ssm/ssm.h) written once over simd::F32x16, the reference's bits on every
// vector ISA: the conv with 16 channels per vector (each channel's taps in k order), the scan with the 16
// partial sums over d_state as one vector (combined by reduce_add: ssm.h's tree); lanes past d_state or past
// the last channel are left out. Include only from *_avx2.cpp / *_avx512.cpp / *_neon.cpp files
// (backends/cpu/simd/f32x16.h).
#pragma once

#include <algorithm>

#include "backends/cpu/exp/exp_f32x16.h"
#include "backends/cpu/runtime/scratch.h"
#include "backends/cpu/ssm/ssm.h"

namespace kvstash::simd {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including ISA file

// Lanes [0, n) of p (n in [1, 16]), the others +0: a plain load for a whole vector.
inline F32x16 load_n(const float* p, int64_t n) { return n == kLanes ? load(p) : load_first(p, n); }
inline void store_n(float* p, F32x16 x, int64_t n) {
    if (n == kLanes) {
        store(p, x);
    } else {
        store_first(p, x, n);
    }
}

// silu(a) = a / (1 + exp_f32(-a)), as the reference.
inline F32x16 silu(F32x16 a) { return div(a, add(set1(1.0f), exp_f32(negate(a)))); }

inline void ssm_conv(const SsmConvArgs& a, int64_t channel_begin, int64_t channel_end) {
    thread_local kernels::ScratchArray taps_buf;
    // d_conv × 16: tap k of the block's channels.
    float* taps = taps_buf.floats(static_cast<size_t>(a.d_conv) * kLanes);
    for (int64_t c0 = channel_begin; c0 < channel_end; c0 += kLanes) {
        const int64_t n = std::min<int64_t>(kLanes, channel_end - c0);
        for (int64_t k = 0; k < a.d_conv; ++k) {
            for (int64_t l = 0; l < kLanes; ++l) {
                taps[k * kLanes + l] = l < n ? a.weight[(c0 + l) * a.d_conv + k] : 0.0f;
            }
        }
        const F32x16 bias = a.bias ? load_n(a.bias + c0, n) : zero();
        auto input = [&](int64_t i) {
            return load_n(i >= 0 ? a.x + i * a.x_stride + c0 : a.window + (a.d_conv - 1 + i) * a.channels + c0, n);
        };
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            const int64_t first = t - a.d_conv + 1;
            F32x16 acc = mul(input(first), load(taps));
            for (int64_t k = 1; k < a.d_conv; ++k) acc = add(acc, mul(input(first + k), load(taps + k * kLanes)));
            if (a.bias) acc = add(acc, bias);
            store_n(a.out + t * a.out_stride + c0, silu(acc), n);
        }
    }
    kernels::ssm_conv_update_window(a, channel_begin, channel_end);
}

// One channel's states [s, s + n) at one token (n in [1, 16]): the state update, then the partial sums
// p += state · C on those lanes. dA: the decays of these states.
inline F32x16 scan_step(float* state, const float* B, const float* C, int64_t n, F32x16 dA, F32x16 xdt,
                        F32x16 partial) {
    const F32x16 st = add(mul(load_n(state, n), dA), mul(load_n(B, n), xdt));
    store_n(state, st, n);
    const F32x16 product = mul(st, load_n(C, n));
    return n == kLanes ? add(partial, product) : add_first(partial, product, n);
}

constexpr int64_t kSmallHeadState = 256;  // floats of one head's state (head_dim × d_state): 16 heads in L1

inline void ssm_scan(const SsmScanArgs& a, int64_t head_begin, int64_t head_end) {
    const int64_t heads_per_group = a.n_head / a.n_group;
    // Per block of 16 heads: n_tokens × 16 softplus(dt) and (Mamba-2) n_tokens × 16 per-head decays, their
    // exps 16 at a time.
    thread_local kernels::ScratchArray per_token_buf;
    float* dts_block = per_token_buf.floats(static_cast<size_t>(a.n_tokens) * 2 * kLanes);
    float* dA_block = dts_block + a.n_tokens * kLanes;
    for (int64_t h0 = head_begin; h0 < head_end; h0 += kLanes) {
        const int64_t n = std::min<int64_t>(kLanes, head_end - h0);
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            alignas(64) float dt[kLanes], exp_dt[kLanes];
            const F32x16 dt_v = load_n(a.dt + t * a.dt_stride + h0, n);
            store(dt, dt_v);
            store(exp_dt, exp_f32(dt_v));
            float* dts = dts_block + t * kLanes;
            for (int64_t l = 0; l < kLanes; ++l)
                dts[l] = l < n ? kernels::ssm_softplus_given_exp(dt[l], exp_dt[l]) : 0.0f;
            if (!a.per_state_decay) store(dA_block + t * kLanes, exp_f32(mul(load(dts), load_n(a.A + h0, n))));
        }
        // One head at one token: its channels' state updates and outputs.
        auto head_token = [&](int64_t h, int64_t t) {
            const int64_t g = h / heads_per_group;
            const float dts = dts_block[t * kLanes + (h - h0)];
            const F32x16 dts_v = set1(dts);
            const float* A = a.per_state_decay ? a.A + h * a.d_state : a.A;  // A + s read only when per_state_decay
            const F32x16 head_dA = a.per_state_decay ? zero() : set1(dA_block[t * kLanes + (h - h0)]);
            const float* B = a.B + t * a.B_stride + g * a.d_state;
            const float* C = a.C + t * a.C_stride + g * a.d_state;
            for (int64_t i = 0; i < a.head_dim; ++i) {
                const int64_t channel = h * a.head_dim + i;
                const float x = a.x[t * a.x_stride + channel];
                const F32x16 xdt = set1(x * dts);
                float* state = a.state + channel * a.d_state;
                F32x16 partial = zero();
                for (int64_t s = 0; s < a.d_state; s += kLanes) {
                    const int64_t m = std::min<int64_t>(kLanes, a.d_state - s);
                    const F32x16 dA = a.per_state_decay ? exp_f32(mul(dts_v, load_n(A + s, m))) : head_dA;
                    partial = scan_step(state + s, B + s, C + s, m, dA, xdt, partial);
                }
                float y = reduce_add(partial);
                if (a.D) y = y + x * a.D[h];
                a.y[t * a.y_stride + channel] = y;
            }
        };
        // Heads are independent, so the loop order is free: small states (Mamba-1) token by token for
        // the whole block (the block's state stays in L1, each token's rows are read once), large ones
        // head by head (a head's state stays in cache over all tokens).
        if (a.head_dim * a.d_state <= kSmallHeadState) {
            for (int64_t t = 0; t < a.n_tokens; ++t) {
                for (int64_t h = h0; h < h0 + n; ++h) head_token(h, t);
            }
        } else {
            for (int64_t h = h0; h < h0 + n; ++h) {
                for (int64_t t = 0; t < a.n_tokens; ++t) head_token(h, t);
            }
        }
    }
}

}  // namespace
}  // namespace kvstash::simd
