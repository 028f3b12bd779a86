// The Mamba kernels (backends/cpu/ssm/ssm.h) on AVX-512, the reference's bits: the conv with 16 channels per
// vector (each channel's taps in k order), the scan with the 16 partial sums over d_state as one vector;
// the lanes past d_state or past the last channel are masked out.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include <algorithm>

#include "backends/cpu/exp/exp_f32_avx512.h"
#include "backends/cpu/runtime/scratch.h"
#include "backends/cpu/ssm/ssm.h"

namespace kvstash::kernels {
namespace {

// Lanes [0, n) of 16 set, n in [0, 16].
inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// silu(a) = a / (1 + exp_f32(-a)), as the reference.
inline __m512 silu16(__m512 a) {
    const __m512 minus_a = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN)));
    return _mm512_div_ps(a, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_f32_avx512(minus_a)));
}

constexpr int64_t kSmallHeadState = 256;  // floats of one head's state (head_dim × d_state): 16 heads in L1

// ssm.h's combination of the 16 partial sums p.
inline float combine_partials(__m512 p) {
    const __m256 q = _mm256_add_ps(_mm512_castps512_ps256(p), _mm512_extractf32x8_ps(p, 1));  // p[j] + p[j + 8]
    const __m128 r = _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));      // q[j] + q[j + 4]
    const __m128 u = _mm_add_ps(r, _mm_movehl_ps(r, r));                                      // r[j] + r[j + 2]
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));                                  // u[0] + u[1]
}

}  // namespace

void ssm_conv_avx512(const SsmConvArgs& a, int64_t channel_begin, int64_t channel_end) {
    thread_local ScratchArray taps_buf;
    float* taps = taps_buf.floats(static_cast<size_t>(a.d_conv) * 16);  // d_conv × 16: tap k of the block's channels
    for (int64_t c0 = channel_begin; c0 < channel_end; c0 += 16) {
        const int64_t n = std::min<int64_t>(16, channel_end - c0);
        const __mmask16 mask = first_lanes(n);
        for (int64_t k = 0; k < a.d_conv; ++k) {
            for (int64_t l = 0; l < 16; ++l) taps[k * 16 + l] = l < n ? a.weight[(c0 + l) * a.d_conv + k] : 0.0f;
        }
        const __m512 bias = a.bias ? _mm512_maskz_loadu_ps(mask, a.bias + c0) : _mm512_setzero_ps();
        auto input = [&](int64_t i) {
            return _mm512_maskz_loadu_ps(
                mask, i >= 0 ? a.x + i * a.x_stride + c0 : a.window + (a.d_conv - 1 + i) * a.channels + c0);
        };
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            const int64_t first = t - a.d_conv + 1;
            __m512 acc = _mm512_mul_ps(input(first), _mm512_load_ps(taps));
            for (int64_t k = 1; k < a.d_conv; ++k) {
                acc = _mm512_add_ps(acc, _mm512_mul_ps(input(first + k), _mm512_load_ps(taps + k * 16)));
            }
            if (a.bias) acc = _mm512_add_ps(acc, bias);
            _mm512_mask_storeu_ps(a.out + t * a.out_stride + c0, mask, silu16(acc));
        }
    }
    ssm_conv_update_window(a, channel_begin, channel_end);
}

void ssm_scan_avx512(const SsmScanArgs& a, int64_t head_begin, int64_t head_end) {
    const int64_t heads_per_group = a.n_head / a.n_group;
    const int64_t whole = a.d_state / 16 * 16;  // states in whole groups of 16
    const __mmask16 rest = first_lanes(a.d_state - whole);
    // Per block of 16 heads: n_tokens × 16 softplus(dt) and (Mamba-2) n_tokens × 16 per-head decays,
    // their exps 16 at a time.
    thread_local ScratchArray per_token_buf;
    float* dts_block = per_token_buf.floats(static_cast<size_t>(a.n_tokens) * 32);
    float* dA_block = dts_block + a.n_tokens * 16;
    for (int64_t h0 = head_begin; h0 < head_end; h0 += 16) {
        const int64_t n = std::min<int64_t>(16, head_end - h0);
        const __mmask16 heads = first_lanes(n);
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            alignas(64) float dt[16], exp_dt[16];
            const __m512 dt_v = _mm512_maskz_loadu_ps(heads, a.dt + t * a.dt_stride + h0);
            _mm512_store_ps(dt, dt_v);
            _mm512_store_ps(exp_dt, exp_f32_avx512(dt_v));
            float* dts = dts_block + t * 16;
            for (int64_t l = 0; l < 16; ++l) dts[l] = l < n ? ssm_softplus_given_exp(dt[l], exp_dt[l]) : 0.0f;
            if (!a.per_state_decay) {
                const __m512 arg = _mm512_mul_ps(_mm512_loadu_ps(dts), _mm512_maskz_loadu_ps(heads, a.A + h0));
                _mm512_storeu_ps(dA_block + t * 16, exp_f32_avx512(arg));
            }
        }
        // One head at one token: its channels' state updates and outputs.
        auto head_token = [&](int64_t h, int64_t t) {
            const int64_t g = h / heads_per_group;
            const float* A = a.per_state_decay ? a.A + h * a.d_state : a.A;  // A + s read only when per_state_decay
            const float dts = dts_block[t * 16 + (h - h0)];
            const __m512 dts_v = _mm512_set1_ps(dts);
            const __m512 head_dA =
                a.per_state_decay ? _mm512_setzero_ps() : _mm512_set1_ps(dA_block[t * 16 + (h - h0)]);
            const float* B = a.B + t * a.B_stride + g * a.d_state;
            const float* C = a.C + t * a.C_stride + g * a.d_state;
            for (int64_t i = 0; i < a.head_dim; ++i) {
                const int64_t channel = h * a.head_dim + i;
                const float x = a.x[t * a.x_stride + channel];
                const __m512 xdt = _mm512_set1_ps(x * dts);
                float* state = a.state + channel * a.d_state;
                __m512 partial = _mm512_setzero_ps();
                // States [s, s + 16) on the lanes of `mask`.
                auto step = [&](int64_t s, __mmask16 mask) {
                    const __m512 dA = a.per_state_decay
                                          ? exp_f32_avx512(_mm512_mul_ps(dts_v, _mm512_maskz_loadu_ps(mask, A + s)))
                                          : head_dA;
                    const __m512 st = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, state + s), dA),
                                                    _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, B + s), xdt));
                    _mm512_mask_storeu_ps(state + s, mask, st);
                    partial = _mm512_mask_add_ps(partial, mask, partial,
                                                 _mm512_mul_ps(st, _mm512_maskz_loadu_ps(mask, C + s)));
                };
                for (int64_t s = 0; s < whole; s += 16) step(s, 0xFFFF);
                if (rest) step(whole, rest);
                float y = combine_partials(partial);
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

}  // namespace kvstash::kernels
