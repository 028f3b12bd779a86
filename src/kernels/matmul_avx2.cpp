// AVX2 + FMA + F16C matmul. One token (decode steps) on a quantized type: the fused tile decodes each
// weight block in registers and multiplies it straight into the accumulators, 4 rows at a time, with a
// software prefetch of the weight stream. Otherwise each W row is decoded into an L1-resident f32 buffer
// with exactly the arithmetic of dequantize_row (so the decoded weights are bitwise the reference ones),
// then a tile of up to 8 rows × 2 tokens runs over k. Both give bitwise the same results.
//
// Reduction order of one dot product (the same in every tile shape, hence batch invariant):
//   acc (8 lanes) = 0; for k = 0, 8, 16, ...: acc = fma(w[k..k+7], x[k..k+7], acc)
//   (a partial last chunk is loaded masked, zeros beyond cols); result = hsum8(acc) (fixed tree).
#pragma GCC optimize("fp-contract=off")  // decode mul-then-add exactly as written, never fused

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/matmul_impl.h"

namespace kvstash::kernels {
namespace {

constexpr int kMaxRows = 8;                // row tile when n_tokens == 1
constexpr int kRowsMulti = 4;              // row tile when several tokens share the decoded rows
constexpr int kMaxTokens = 2;              // token tile (16 ymm registers: 8 accumulators + operands)
constexpr int64_t kTokenBlock = 64;        // tokens per pass over a decoded row tile (keeps X in L2)
constexpr int kFusedRows = 4;              // rows decoded together by the fused one-token tile
constexpr int64_t kPrefetchBytes = 16384;  // fused: least distance of the weight prefetch (bytes)

// F16C conversion: exact, equal to fp16_to_fp32 except that a signalling NaN comes back quiet.
float load_fp16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

__m256i load_u8x8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// ---- decoders: n elements of one row -> dst, bitwise equal to dequantize_row ----

void decode_f16(const uint8_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
    }
    for (; i < n; ++i) dst[i] = load_fp16(src + 2 * i);  // the tail, with the same conversion
}

void decode_bf16(const uint8_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
    }
}

void decode_q8_0(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, src += 34, dst += 32) {
        const __m256 d = _mm256_set1_ps(load_fp16(src));
        for (int c = 0; c < 4; ++c) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 2 + 8 * c)));
            _mm256_storeu_ps(dst + 8 * c, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

void decode_q4_0(const uint8_t* src, float* dst, int64_t n) {
    const __m256i low4 = _mm256_set1_epi32(0x0F);
    const __m256i eight = _mm256_set1_epi32(8);
    for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
        const __m256 d = _mm256_set1_ps(load_fp16(src));
        for (int c = 0; c < 2; ++c) {
            const __m256i q = load_u8x8(src + 2 + 8 * c);
            const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(q, low4), eight);
            const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight);
            _mm256_storeu_ps(dst + 8 * c, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), d));
            _mm256_storeu_ps(dst + 16 + 8 * c, _mm256_mul_ps(_mm256_cvtepi32_ps(hi), d));
        }
    }
}

void decode_q4_1(const uint8_t* src, float* dst, int64_t n) {
    const __m256i low4 = _mm256_set1_epi32(0x0F);
    for (int64_t b = 0; b < n / 32; ++b, src += 20, dst += 32) {
        const __m256 d = _mm256_set1_ps(load_fp16(src));
        const __m256 m = _mm256_set1_ps(load_fp16(src + 2));
        for (int c = 0; c < 2; ++c) {
            const __m256i q = load_u8x8(src + 4 + 8 * c);
            const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(q, low4));
            const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(q, 4));
            _mm256_storeu_ps(dst + 8 * c, _mm256_add_ps(_mm256_mul_ps(lo, d), m));
            _mm256_storeu_ps(dst + 16 + 8 * c, _mm256_add_ps(_mm256_mul_ps(hi, d), m));
        }
    }
}

// q4_K / q5_K: 4 groups of 64 elements; group g uses scales 2g (low nibbles) and 2g+1 (high nibbles);
// q5_K adds bit 2g / 2g+1 of qh[l] as the fifth bit.
template <bool kFiveBit>
void decode_q45_k(const uint8_t* src, float* dst, int64_t n) {
    const __m256i low4 = _mm256_set1_epi32(0x0F);
    const __m256i one = _mm256_set1_epi32(1);
    constexpr int kBlockBytes = kFiveBit ? 176 : 144;
    for (int64_t b = 0; b < n / 256; ++b, src += kBlockBytes) {
        const float d = load_fp16(src);
        const float dmin = load_fp16(src + 2);
        const uint8_t* scales = src + 4;
        const uint8_t* qh = src + 16;
        const uint8_t* q = src + (kFiveBit ? 48 : 16);
        for (int g = 0; g < 4; ++g, q += 32, dst += 64) {
            int sc, mn;
            k_quant_scale_min(2 * g, scales, &sc, &mn);
            const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc));
            const __m256 m1 = _mm256_set1_ps(dmin * static_cast<float>(mn));
            k_quant_scale_min(2 * g + 1, scales, &sc, &mn);
            const __m256 d2 = _mm256_set1_ps(d * static_cast<float>(sc));
            const __m256 m2 = _mm256_set1_ps(dmin * static_cast<float>(mn));
            for (int c = 0; c < 4; ++c) {
                const __m256i qv = load_u8x8(q + 8 * c);
                __m256i lo = _mm256_and_si256(qv, low4);
                __m256i hi = _mm256_srli_epi32(qv, 4);
                if constexpr (kFiveBit) {
                    const __m256i h = load_u8x8(qh + 8 * c);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * g), one), 4));
                    hi = _mm256_or_si256(hi,
                                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * g + 1), one), 4));
                }
                _mm256_storeu_ps(dst + 8 * c, _mm256_sub_ps(_mm256_mul_ps(d1, _mm256_cvtepi32_ps(lo)), m1));
                _mm256_storeu_ps(dst + 32 + 8 * c, _mm256_sub_ps(_mm256_mul_ps(d2, _mm256_cvtepi32_ps(hi)), m2));
            }
        }
    }
}

// q6_K: two halves of 128 elements; see dequantize_q6_k in format/tensor_type.cpp for the bit layout.
void decode_q6_k(const uint8_t* src, float* dst, int64_t n) {
    const __m256i low4 = _mm256_set1_epi32(0x0F);
    const __m256i three = _mm256_set1_epi32(3);
    const __m256i bias = _mm256_set1_epi32(32);
    for (int64_t b = 0; b < n / 256; ++b, src += 210) {
        const uint8_t* ql = src;
        const uint8_t* qh = src + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
        const float d = load_fp16(src + 208);
        for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
            for (int c = 0; c < 4; ++c) {  // l = 8c .. 8c+7, scale index c / 2
                const __m256i a = load_u8x8(ql + 8 * c);
                const __m256i a2 = load_u8x8(ql + 32 + 8 * c);
                const __m256i h = load_u8x8(qh + 8 * c);
                const __m256i q[4] = {
                    _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_slli_epi32(_mm256_and_si256(h, three), 4)),
                    _mm256_or_si256(_mm256_and_si256(a2, low4),
                                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2), three), 4)),
                    _mm256_or_si256(_mm256_srli_epi32(a, 4),
                                    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4), three), 4)),
                    _mm256_or_si256(_mm256_srli_epi32(a2, 4), _mm256_slli_epi32(_mm256_srli_epi32(h, 6), 4)),
                };
                for (int k = 0; k < 4; ++k) {
                    const __m256 ds = _mm256_set1_ps(d * static_cast<float>(sc[c / 2 + 2 * k]));
                    const __m256 qf = _mm256_cvtepi32_ps(_mm256_sub_epi32(q[k], bias));
                    _mm256_storeu_ps(dst + 32 * k + 8 * c, _mm256_mul_ps(ds, qf));
                }
            }
        }
    }
}

void decode_row(TensorType type, const uint8_t* src, float* dst, int64_t n) {
    switch (type) {
        case TensorType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
        case TensorType::F16: decode_f16(src, dst, n); return;
        case TensorType::BF16: decode_bf16(src, dst, n); return;
        case TensorType::Q8_0: decode_q8_0(src, dst, n); return;
        case TensorType::Q4_0: decode_q4_0(src, dst, n); return;
        case TensorType::Q4_1: decode_q4_1(src, dst, n); return;
        case TensorType::Q4_K: decode_q45_k<false>(src, dst, n); return;
        case TensorType::Q5_K: decode_q45_k<true>(src, dst, n); return;
        case TensorType::Q6_K: decode_q6_k(src, dst, n); return;
    }
}

// ---- the f32 tile ----

float hsum8(__m256 v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

// y[j * y_stride + i] = dot(w[i], x + j * cols) for i < NR, j < NT.
template <int NR, int NT>
void tile(const float* const* w, const float* x, int64_t cols, float* y, int64_t y_stride) {
    __m256 acc[NR][NT];
    for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= cols; k += 8) {
        __m256 xv[NT];
        for (int j = 0; j < NT; ++j) xv[j] = _mm256_loadu_ps(x + j * cols + k);
        for (int i = 0; i < NR; ++i) {
            const __m256 wv = _mm256_loadu_ps(w[i] + k);
            for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    if (k < cols) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols - k)), lane);
        __m256 xv[NT];
        for (int j = 0; j < NT; ++j) xv[j] = _mm256_maskload_ps(x + j * cols + k, mask);
        for (int i = 0; i < NR; ++i) {
            const __m256 wv = _mm256_maskload_ps(w[i] + k, mask);
            for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) y[j * y_stride + i] = hsum8(acc[i][j]);
}

using TileFn = void (*)(const float* const*, const float*, int64_t, float*, int64_t);

template <int NR>
constexpr TileFn tile_for_tokens(int nt) {
    if constexpr (NR > kRowsMulti || kMaxTokens == 1) {
        return &tile<NR, 1>;  // wide row tiles are only used for a single token
    } else {
        return nt == 1 ? &tile<NR, 1> : &tile<NR, kMaxTokens>;
    }
}

TileFn tile_fn(int nr, int nt) {
    switch (nr) {
        case 1: return tile_for_tokens<1>(nt);
        case 2: return tile_for_tokens<2>(nt);
        case 3: return tile_for_tokens<3>(nt);
        case 4: return tile_for_tokens<4>(nt);
        case 5: return tile_for_tokens<5>(nt);
        case 6: return tile_for_tokens<6>(nt);
        case 7: return tile_for_tokens<7>(nt);
        default: return tile_for_tokens<8>(nt);
    }
}

// ---- fused one-token tile: weights decoded in registers ----
// Block::prepare(src, n, p) writes kScales floats per block for n consecutive blocks (fp16 scales
// converted, K-quant sub-block scales multiplied out, with the reference's operations);
// Block::step<S>(src, p, f) calls f(c, w) for the 8-element chunks c of step S (S = 0 .. kSteps-1, in
// element order), w = the decoded weights, bitwise equal to dequantize_row. A weight q*d + m (q*d exact
// in fp32: 4-5 bit q, 11-17 bit d) is computed as fma(q, d, m), the same single rounding.

struct FusedQ8_0 {
    static constexpr int kElems = 32, kBytes = 34, kScales = 1, kSteps = 1, kStepChunks = 4;
    static void prepare(const uint8_t* s, int64_t n, float* p) {
        for (int64_t b = 0; b < n; ++b) p[b] = load_fp16(s + b * kBytes);
    }
    template <int S, class F>
    static void step(const uint8_t* s, const float* p, F&& f) {
        const __m256 d = _mm256_set1_ps(p[0]);
        for (int c = 0; c < 4; ++c) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 2 + 8 * c)));
            f(c, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
};

struct FusedQ4_0 {  // x = (q - 8) * d
    static constexpr int kElems = 32, kBytes = 18, kScales = 1, kSteps = 1, kStepChunks = 4;
    static void prepare(const uint8_t* s, int64_t n, float* p) {
        for (int64_t b = 0; b < n; ++b) p[b] = load_fp16(s + b * kBytes);
    }
    template <int S, class F>
    static void step(const uint8_t* s, const float* p, F&& f) {
        const __m256i low4 = _mm256_set1_epi32(0x0F), eight = _mm256_set1_epi32(8);
        const __m256 d = _mm256_set1_ps(p[0]);
        const __m256i q0 = load_u8x8(s + 2), q1 = load_u8x8(s + 10);
        f(0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(q0, low4), eight)), d));
        f(1, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(q1, low4), eight)), d));
        f(2, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(q0, 4), eight)), d));
        f(3, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(q1, 4), eight)), d));
    }
};

struct FusedQ4_1 {  // x = q * d + m
    static constexpr int kElems = 32, kBytes = 20, kScales = 2, kSteps = 1, kStepChunks = 4;
    static void prepare(const uint8_t* s, int64_t n, float* p) {
        for (int64_t b = 0; b < n; ++b) {
            const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(s + b * kBytes))));
            _mm_storel_pi(reinterpret_cast<__m64*>(p + 2 * b), dm);  // d, m
        }
    }
    template <int S, class F>
    static void step(const uint8_t* s, const float* p, F&& f) {
        const __m256i low4 = _mm256_set1_epi32(0x0F);
        const __m256 d = _mm256_set1_ps(p[0]), m = _mm256_set1_ps(p[1]);
        const __m256i q0 = load_u8x8(s + 4), q1 = load_u8x8(s + 12);
        f(0, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(q0, low4)), d, m));
        f(1, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(q1, low4)), d, m));
        f(2, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(q0, 4)), d, m));
        f(3, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(q1, 4)), d, m));
    }
};

// q4_K / q5_K: step S = sub-block S (32 elements): quant bytes 32 (S / 2) .. + 31, low nibbles for even
// S, high for odd S. Prepared: p[j] = d * sc_j, p[8 + j] = -(dmin * m_j).
template <bool kFiveBit>
struct FusedQ45_K {
    static constexpr int kElems = 256, kBytes = kFiveBit ? 176 : 144, kScales = 16, kSteps = 8, kStepChunks = 4;
    static void prepare(const uint8_t* s, int64_t n, float* p) {
        for (int64_t b = 0; b < n; ++b, s += kBytes, p += kScales) {
            const float d = load_fp16(s), neg_dmin = -load_fp16(s + 2);
            for (int j = 0; j < 8; ++j) {
                int sc, mn;
                k_quant_scale_min(j, s + 4, &sc, &mn);
                p[j] = d * static_cast<float>(sc);
                p[8 + j] = neg_dmin * static_cast<float>(mn);
            }
        }
    }
    template <int S, class F>
    static void step(const uint8_t* s, const float* p, F&& f) {
        const __m256i low4 = _mm256_set1_epi32(0x0F), one = _mm256_set1_epi32(1);
        const uint8_t* q = s + (kFiveBit ? 48 : 16) + 32 * (S / 2);
        const __m256 d = _mm256_set1_ps(p[S]), neg_m = _mm256_set1_ps(p[8 + S]);
        for (int c = 0; c < 4; ++c) {
            const __m256i qv = load_u8x8(q + 8 * c);
            __m256i qi = S % 2 == 0 ? _mm256_and_si256(qv, low4) : _mm256_srli_epi32(qv, 4);
            if constexpr (kFiveBit) {
                const __m256i h = load_u8x8(s + 16 + 8 * c);
                qi = _mm256_or_si256(qi, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, S), one), 4));
                f(c, _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(qi)), neg_m));  // fl(fl(d q) - m)
            } else {
                f(c, _mm256_fmadd_ps(_mm256_cvtepi32_ps(qi), d, neg_m));
            }
        }
    }
};

// q6_K: step S = (half S / 4, k = S % 4): elements 128 half + 32 k + l, l < 32; prepared p[j] = d * sc[j].
struct FusedQ6_K {
    static constexpr int kElems = 256, kBytes = 210, kScales = 16, kSteps = 8, kStepChunks = 4;
    static void prepare(const uint8_t* s, int64_t n, float* p) {
        for (int64_t b = 0; b < n; ++b, s += kBytes, p += kScales) {
            const float d = load_fp16(s + 208);
            const int8_t* sc = reinterpret_cast<const int8_t*>(s + 192);
            for (int j = 0; j < 16; ++j) p[j] = d * static_cast<float>(sc[j]);
        }
    }
    template <int S, class F>
    static void step(const uint8_t* s, const float* p, F&& f) {
        constexpr int half = S / 4, k = S % 4;
        const __m256i low4 = _mm256_set1_epi32(0x0F), three = _mm256_set1_epi32(3), bias = _mm256_set1_epi32(32);
        const uint8_t* ql = s + 64 * half + (k % 2 == 1 ? 32 : 0);
        const uint8_t* qh = s + 128 + 32 * half;
        for (int c = 0; c < 4; ++c) {
            const __m256i a = load_u8x8(ql + 8 * c), h = load_u8x8(qh + 8 * c);
            const __m256i lo = k < 2 ? _mm256_and_si256(a, low4) : _mm256_srli_epi32(a, 4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(h, 2 * k), three);
            const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 4));
            const __m256 ds = _mm256_set1_ps(p[8 * half + c / 2 + 2 * k]);
            f(c, _mm256_mul_ps(ds, _mm256_cvtepi32_ps(_mm256_sub_epi32(q, bias))));
        }
    }
};

template <class F, int... S>
__attribute__((always_inline)) inline void for_steps(std::integer_sequence<int, S...>, F&& f) {
    (f(std::integral_constant<int, S>{}), ...);
}

// y[i] = dot(row i, x) for i < NR; row i starts at w + i * row_bytes. The rows' scales are prepared
// kGroupBlocks blocks at a time; each row's block is prefetched `ahead` bytes before use.
template <class Block, int NR>
void fused_tile(const uint8_t* w, uint64_t row_bytes, const float* x, int64_t cols, float* y) {
    constexpr int kGroupBlocks = Block::kElems == 32 ? 16 : 4;
    const int64_t n_blocks = cols / Block::kElems;
    const int64_t ahead = std::max<int64_t>(kPrefetchBytes, static_cast<int64_t>(NR * row_bytes));
    alignas(32) float scales[NR][kGroupBlocks * Block::kScales];
    __m256 acc[NR];
    for (int i = 0; i < NR; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t g = 0; g < n_blocks; g += kGroupBlocks) {
        const int64_t n_group = std::min<int64_t>(kGroupBlocks, n_blocks - g);
        for (int i = 0; i < NR; ++i) Block::prepare(w + i * row_bytes + g * Block::kBytes, n_group, scales[i]);
        for (int64_t b = 0; b < n_group; ++b) {
            const float* xb = x + (g + b) * Block::kElems;
            for_steps(std::make_integer_sequence<int, Block::kSteps>{}, [&](auto step) {
                constexpr int c0 = step.value * Block::kStepChunks;
                __m256 xs[Block::kStepChunks];
                for (int c = 0; c < Block::kStepChunks; ++c) xs[c] = _mm256_loadu_ps(xb + 8 * (c0 + c));
                for (int i = 0; i < NR; ++i) {
                    const uint8_t* src = w + i * row_bytes + (g + b) * Block::kBytes;
                    if (Block::kBytes > 64 ? step.value % 2 == 0 : step.value == 0) {  // ~ a line per 64 bytes
                        _mm_prefetch(reinterpret_cast<const char*>(src) + ahead + 32 * step.value, _MM_HINT_T1);
                    }
                    Block::template step<step.value>(src, scales[i] + b * Block::kScales, [&](int c, __m256 wv) {
                        acc[i] = _mm256_fmadd_ps(wv, xs[c], acc[i]);
                    });
                }
            });
        }
    }
    for (int i = 0; i < NR; ++i) y[i] = hsum8(acc[i]);
}

template <class Block>
void fused_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    int64_t r = row_begin;
    for (; r + kFusedRows <= row_end; r += kFusedRows) {
        fused_tile<Block, kFusedRows>(a.W + static_cast<uint64_t>(r) * a.row_bytes, a.row_bytes, a.X, a.cols, a.Y + r);
    }
    for (; r < row_end; ++r) {
        fused_tile<Block, 1>(a.W + static_cast<uint64_t>(r) * a.row_bytes, a.row_bytes, a.X, a.cols, a.Y + r);
    }
}

// One token on a quantized type; false for the plain float types (they take the buffered path).
bool run_fused(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    switch (a.type) {
        case TensorType::Q8_0: fused_rows<FusedQ8_0>(a, row_begin, row_end); return true;
        case TensorType::Q4_0: fused_rows<FusedQ4_0>(a, row_begin, row_end); return true;
        case TensorType::Q4_1: fused_rows<FusedQ4_1>(a, row_begin, row_end); return true;
        case TensorType::Q4_K: fused_rows<FusedQ45_K<false>>(a, row_begin, row_end); return true;
        case TensorType::Q5_K: fused_rows<FusedQ45_K<true>>(a, row_begin, row_end); return true;
        case TensorType::Q6_K: fused_rows<FusedQ6_K>(a, row_begin, row_end); return true;
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: return false;
    }
    return false;
}

}  // namespace

void matmul_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.n_tokens == 1 && run_fused(a, row_begin, row_end)) return;
    const int max_rows = a.n_tokens == 1 ? kMaxRows : kRowsMulti;
    const bool direct = a.type == TensorType::F32;  // f32 rows are used in place
    thread_local std::vector<float> decoded;        // max_rows × cols, per worker
    if (!direct && decoded.size() < static_cast<size_t>(max_rows * a.cols)) {
        decoded.resize(static_cast<size_t>(max_rows * a.cols));
    }
    const float* w[kMaxRows];
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokenBlock) {
        const int64_t t_end = std::min(a.n_tokens, t0 + kTokenBlock);
        for (int64_t r = row_begin; r < row_end; r += max_rows) {
            const int nr = static_cast<int>(std::min<int64_t>(max_rows, row_end - r));
            for (int i = 0; i < nr; ++i) {
                const uint8_t* src = a.W + static_cast<uint64_t>(r + i) * a.row_bytes;
                if (direct) {
                    w[i] = reinterpret_cast<const float*>(src);
                } else {
                    float* dst = decoded.data() + i * a.cols;
                    decode_row(a.type, src, dst, a.cols);
                    w[i] = dst;
                }
            }
            for (int64_t t = t0; t < t_end; t += kMaxTokens) {
                const int nt = static_cast<int>(std::min<int64_t>(kMaxTokens, t_end - t));
                tile_fn(nr, nt)(w, a.X + t * a.cols, a.cols, a.Y + t * a.y_stride + r, a.y_stride);
            }
        }
    }
}

}  // namespace kvstash::kernels
