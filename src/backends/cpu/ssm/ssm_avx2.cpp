// The Mamba kernels (backends/cpu/ssm/ssm.h) on AVX2, the reference's bits: the conv with 8 channels per vector
// (each channel's taps in k order), the scan with the 16 partial sums over d_state as two vectors
// (lanes 0-7 and 8-15); the lanes past d_state or past the last channel are masked out.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include <algorithm>

#include "backends/cpu/exp/exp_f32_avx2.h"
#include "backends/cpu/runtime/scratch.h"
#include "backends/cpu/ssm/ssm.h"

namespace kvstash::kernels {
namespace {

// Lanes [0, n) of 8 set, n in [0, 8].
inline __m256i first_lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline __m256 load(const float* p, bool full, __m256i mask) {
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
}

// silu(a) = a / (1 + exp_f32(-a)), as the reference.
inline __m256 silu8(__m256 a) {
    const __m256 e = exp_f32_avx2(_mm256_xor_ps(a, _mm256_set1_ps(-0.0f)));
    return _mm256_div_ps(a, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

constexpr int64_t kSmallHeadState = 512;  // floats of one head's state (head_dim × d_state): 8 heads in L1

// ssm.h's combination of the 16 partial sums: lo = p[0..7], hi = p[8..15].
inline float combine_partials(__m256 lo, __m256 hi) {
    const __m256 q = _mm256_add_ps(lo, hi);                                               // q[j] = p[j] + p[j + 8]
    const __m128 r = _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));  // q[j] + q[j + 4]
    const __m128 u = _mm_add_ps(r, _mm_movehl_ps(r, r));                                  // r[j] + r[j + 2]
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));                              // u[0] + u[1]
}

// One group of 8 states of one channel at one token: the state update, then the partial sums
// p += state · C on the lanes of `mask` (all when full).
struct ScanStep {
    __m256 dts, xdt, dA;  // dA: Mamba-2's per-head decay (unused when per_state_decay)
    bool per_state_decay;

    // A: this head's decays of these 8 states (per_state_decay), else null.
    inline __m256 run(float* state, const float* A, const float* B, const float* C, __m256 partial, bool full,
                      __m256i mask) const {
        const __m256 dA = per_state_decay ? exp_f32_avx2(_mm256_mul_ps(dts, load(A, full, mask))) : this->dA;
        const __m256 s =
            _mm256_add_ps(_mm256_mul_ps(load(state, full, mask), dA), _mm256_mul_ps(load(B, full, mask), xdt));
        const __m256 product = _mm256_mul_ps(s, load(C, full, mask));
        if (full) {
            _mm256_storeu_ps(state, s);
            return _mm256_add_ps(partial, product);
        }
        _mm256_maskstore_ps(state, mask, s);
        return _mm256_blendv_ps(partial, _mm256_add_ps(partial, product), _mm256_castsi256_ps(mask));
    }
};

// Mamba-2's common case (one decay per head, d_state a multiple of 16): one channel's states and output
// sum, ScanStep::run's operations in its order, without its masks and per-state decays (a separate loop
// compiles to fewer instructions per 8 states: the scan is bound by them, 5 per 8 states).
inline float scan_channel_whole(float* state, int64_t d_state, const float* B, const float* C, __m256 dA, __m256 xdt) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int64_t s = 0; s < d_state; s += 16) {
        const __m256 s0 =
            _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(state + s), dA), _mm256_mul_ps(_mm256_loadu_ps(B + s), xdt));
        const __m256 s1 = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(state + s + 8), dA),
                                        _mm256_mul_ps(_mm256_loadu_ps(B + s + 8), xdt));
        _mm256_storeu_ps(state + s, s0);
        _mm256_storeu_ps(state + s + 8, s1);
        lo = _mm256_add_ps(lo, _mm256_mul_ps(s0, _mm256_loadu_ps(C + s)));
        hi = _mm256_add_ps(hi, _mm256_mul_ps(s1, _mm256_loadu_ps(C + s + 8)));
    }
    return combine_partials(lo, hi);
}

}  // namespace

void ssm_conv_avx2(const SsmConvArgs& a, int64_t channel_begin, int64_t channel_end) {
    thread_local ScratchArray taps_buf;
    float* taps = taps_buf.floats(static_cast<size_t>(a.d_conv) * 8);  // d_conv × 8: tap k of the block's channels
    for (int64_t c0 = channel_begin; c0 < channel_end; c0 += 8) {
        const int64_t n = std::min<int64_t>(8, channel_end - c0);
        const bool full = n == 8;
        const __m256i mask = first_lanes(n);
        for (int64_t k = 0; k < a.d_conv; ++k) {
            for (int64_t l = 0; l < 8; ++l) taps[k * 8 + l] = l < n ? a.weight[(c0 + l) * a.d_conv + k] : 0.0f;
        }
        const __m256 bias = a.bias ? load(a.bias + c0, full, mask) : _mm256_setzero_ps();
        auto input = [&](int64_t i) {
            return load(i >= 0 ? a.x + i * a.x_stride + c0 : a.window + (a.d_conv - 1 + i) * a.channels + c0, full,
                        mask);
        };
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            const int64_t first = t - a.d_conv + 1;
            __m256 acc = _mm256_mul_ps(input(first), _mm256_load_ps(taps));
            for (int64_t k = 1; k < a.d_conv; ++k) {
                acc = _mm256_add_ps(acc, _mm256_mul_ps(input(first + k), _mm256_load_ps(taps + k * 8)));
            }
            if (a.bias) acc = _mm256_add_ps(acc, bias);
            const __m256 y = silu8(acc);
            float* out = a.out + t * a.out_stride + c0;
            if (full) {
                _mm256_storeu_ps(out, y);
            } else {
                _mm256_maskstore_ps(out, mask, y);
            }
        }
    }
    ssm_conv_update_window(a, channel_begin, channel_end);
}

void ssm_scan_avx2(const SsmScanArgs& a, int64_t head_begin, int64_t head_end) {
    const int64_t heads_per_group = a.n_head / a.n_group;
    const int64_t whole = a.d_state / 16 * 16;  // states in whole groups of 16
    const int64_t rest = a.d_state - whole;     // then lanes [0, rest) of one more group
    const __m256i mask_lo = first_lanes(std::min<int64_t>(rest, 8));
    const __m256i mask_hi = first_lanes(std::max<int64_t>(rest - 8, 0));
    const __m256i all = _mm256_set1_epi32(-1);
    // Per block of 8 heads: n_tokens × 8 softplus(dt) and (Mamba-2) n_tokens × 8 per-head decays, their
    // exps 8 at a time.
    thread_local ScratchArray per_token_buf;
    float* dts_block = per_token_buf.floats(static_cast<size_t>(a.n_tokens) * 16);
    float* dA_block = dts_block + a.n_tokens * 8;
    for (int64_t h0 = head_begin; h0 < head_end; h0 += 8) {
        const int64_t n = std::min<int64_t>(8, head_end - h0);
        const __m256i heads = first_lanes(n);
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            alignas(32) float dt[8], exp_dt[8];
            const __m256 dt_v = _mm256_maskload_ps(a.dt + t * a.dt_stride + h0, heads);
            _mm256_store_ps(dt, dt_v);
            _mm256_store_ps(exp_dt, exp_f32_avx2(dt_v));
            float* dts = dts_block + t * 8;
            for (int64_t l = 0; l < 8; ++l) dts[l] = l < n ? ssm_softplus_given_exp(dt[l], exp_dt[l]) : 0.0f;
            if (!a.per_state_decay) {
                const __m256 arg = _mm256_mul_ps(_mm256_loadu_ps(dts), _mm256_maskload_ps(a.A + h0, heads));
                _mm256_storeu_ps(dA_block + t * 8, exp_f32_avx2(arg));
            }
        }
        // One head at one token: its channels' state updates and outputs.
        auto head_token = [&](int64_t h, int64_t t) {
            const int64_t g = h / heads_per_group;
            const float* A = a.per_state_decay ? a.A + h * a.d_state : nullptr;
            const float dts = dts_block[t * 8 + (h - h0)];
            ScanStep step;
            step.per_state_decay = a.per_state_decay;
            step.dts = _mm256_set1_ps(dts);
            step.dA = a.per_state_decay ? _mm256_setzero_ps() : _mm256_set1_ps(dA_block[t * 8 + (h - h0)]);
            const float* B = a.B + t * a.B_stride + g * a.d_state;
            const float* C = a.C + t * a.C_stride + g * a.d_state;
            if (!a.per_state_decay && rest == 0) {
                for (int64_t i = 0; i < a.head_dim; ++i) {
                    const int64_t channel = h * a.head_dim + i;
                    const float x = a.x[t * a.x_stride + channel];
                    float y = scan_channel_whole(a.state + channel * a.d_state, a.d_state, B, C, step.dA,
                                                 _mm256_set1_ps(x * dts));
                    if (a.D) y = y + x * a.D[h];
                    a.y[t * a.y_stride + channel] = y;
                }
                return;
            }
            auto at = [&](int64_t s) { return A ? A + s : nullptr; };
            for (int64_t i = 0; i < a.head_dim; ++i) {
                const int64_t channel = h * a.head_dim + i;
                const float x = a.x[t * a.x_stride + channel];
                step.xdt = _mm256_set1_ps(x * dts);
                float* state = a.state + channel * a.d_state;
                __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
                for (int64_t s = 0; s < whole; s += 16) {
                    lo = step.run(state + s, at(s), B + s, C + s, lo, true, all);
                    hi = step.run(state + s + 8, at(s + 8), B + s + 8, C + s + 8, hi, true, all);
                }
                if (rest > 0) lo = step.run(state + whole, at(whole), B + whole, C + whole, lo, rest >= 8, mask_lo);
                if (rest > 8) {
                    const int64_t s = whole + 8;
                    hi = step.run(state + s, at(s), B + s, C + s, hi, false, mask_hi);
                }
                float y = combine_partials(lo, hi);
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
