// AVX-512 matmul: each W row is decoded into an L1-resident f32 buffer with exactly the arithmetic of
// dequantize_row (so the decoded weights are bitwise the reference ones), then a tile of up to 8 rows ×
// 4 tokens runs over k.
//
// Reduction order of one dot product (the same in every tile shape, hence batch invariant):
//   acc (16 lanes) = 0; for k = 0, 16, 32, ...: acc = fma(w[k..k+15], x[k..k+15], acc)
//   (a partial last chunk is loaded masked, zeros beyond cols); result = hsum16(acc) (fixed tree).
#pragma GCC optimize("fp-contract=off")  // decode mul-then-add exactly as written, never fused

// GCC 12's AVX-512 headers self-initialize "undefined" vectors (`__m512 __Y = __Y;`), which -Wall
// reports as uninitialized once inlined (GCC bug 105593). Silence it for the header lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/matmul_impl.h"

namespace kvstash::kernels {
namespace {

constexpr int kMaxRows = 8;         // row tile when n_tokens == 1
constexpr int kRowsMulti = 4;       // row tile when several tokens share the decoded rows
constexpr int kMaxTokens = 4;       // token tile
constexpr int64_t kTokenBlock = 64; // tokens per pass over a decoded row tile (keeps X in L2)

// F16C conversion: exact, equal to fp16_to_fp32 except that a signalling NaN comes back quiet.
float load_fp16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

__m512i load_u8x16(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// ---- decoders: n elements of one row -> dst, bitwise equal to dequantize_row ----

void decode_f16(const uint8_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i))));
    }
    for (; i < n; ++i) dst[i] = load_fp16(src + 2 * i);  // the tail, with the same conversion
}

void decode_bf16(const uint8_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
    for (; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
    }
}

void decode_q8_0(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, src += 34, dst += 32) {
        const __m512 d = _mm512_set1_ps(load_fp16(src));
        for (int h = 0; h < 2; ++h) {
            const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 + 16 * h)));
            _mm512_storeu_ps(dst + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
        }
    }
}

// q4_0 / q4_1: the 16 possible values of a block are computed once, with dequantize_row's operations
// (float(q - 8) * d, or float(q) * d + m), and looked up by nibble (vpermps uses the low 4 index bits).
// (A function, not a namespace-scope constant: a static initializer would run AVX-512 code at program
// start, even on CPUs without it.)
__m512 nibble_values() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

void decode_q4_0(const uint8_t* src, float* dst, int64_t n) {
    const __m512 centered = _mm512_sub_ps(nibble_values(), _mm512_set1_ps(8.0f));  // exact
    for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
        const __m512 table = _mm512_mul_ps(centered, _mm512_set1_ps(load_fp16(src)));
        const __m512i q = load_u8x16(src + 2);
        _mm512_storeu_ps(dst, _mm512_permutexvar_ps(q, table));
        _mm512_storeu_ps(dst + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table));
    }
}

void decode_q4_1(const uint8_t* src, float* dst, int64_t n) {
    const __m512 nibbles = nibble_values();
    for (int64_t b = 0; b < n / 32; ++b, src += 20, dst += 32) {
        const __m512 d = _mm512_set1_ps(load_fp16(src));
        const __m512 m = _mm512_set1_ps(load_fp16(src + 2));
        const __m512 table = _mm512_add_ps(_mm512_mul_ps(nibbles, d), m);
        const __m512i q = load_u8x16(src + 4);
        _mm512_storeu_ps(dst, _mm512_permutexvar_ps(q, table));
        _mm512_storeu_ps(dst + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table));
    }
}

// q4_K / q5_K: 4 groups of 64 elements; group g uses scales 2g (low nibbles) and 2g+1 (high nibbles);
// q5_K adds bit 2g / 2g+1 of qh[l] as the fifth bit.
template <bool kFiveBit>
void decode_q45_k(const uint8_t* src, float* dst, int64_t n) {
    const __m512i low4 = _mm512_set1_epi32(0x0F);
    const __m512i one = _mm512_set1_epi32(1);
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
            const __m512 d1 = _mm512_set1_ps(d * static_cast<float>(sc));
            const __m512 m1 = _mm512_set1_ps(dmin * static_cast<float>(mn));
            k_quant_scale_min(2 * g + 1, scales, &sc, &mn);
            const __m512 d2 = _mm512_set1_ps(d * static_cast<float>(sc));
            const __m512 m2 = _mm512_set1_ps(dmin * static_cast<float>(mn));
            for (int c = 0; c < 2; ++c) {
                const __m512i qv = load_u8x16(q + 16 * c);
                __m512i lo = _mm512_and_si512(qv, low4);
                __m512i hi = _mm512_srli_epi32(qv, 4);
                if constexpr (kFiveBit) {
                    const __m512i h = load_u8x16(qh + 16 * c);
                    lo = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2 * g), one), 4));
                    hi = _mm512_or_si512(hi,
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2 * g + 1), one), 4));
                }
                _mm512_storeu_ps(dst + 16 * c, _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(lo)), m1));
                _mm512_storeu_ps(dst + 32 + 16 * c, _mm512_sub_ps(_mm512_mul_ps(d2, _mm512_cvtepi32_ps(hi)), m2));
            }
        }
    }
}

// q6_K: two halves of 128 elements; see dequantize_q6_k in format/tensor_type.cpp for the bit layout.
void decode_q6_k(const uint8_t* src, float* dst, int64_t n) {
    const __m512i low4 = _mm512_set1_epi32(0x0F);
    const __m512i three = _mm512_set1_epi32(3);
    const __m512i bias = _mm512_set1_epi32(32);
    for (int64_t b = 0; b < n / 256; ++b, src += 210) {
        const uint8_t* ql = src;
        const uint8_t* qh = src + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
        const float d = load_fp16(src + 208);
        for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
            for (int c = 0; c < 2; ++c) {  // l = 16c .. 16c+15, scale index c
                const __m512i a = load_u8x16(ql + 16 * c);
                const __m512i a2 = load_u8x16(ql + 32 + 16 * c);
                const __m512i h = load_u8x16(qh + 16 * c);
                const __m512i q[4] = {
                    _mm512_or_si512(_mm512_and_si512(a, low4), _mm512_slli_epi32(_mm512_and_si512(h, three), 4)),
                    _mm512_or_si512(_mm512_and_si512(a2, low4),
                                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2), three), 4)),
                    _mm512_or_si512(_mm512_srli_epi32(a, 4),
                                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 4), three), 4)),
                    _mm512_or_si512(_mm512_srli_epi32(a2, 4), _mm512_slli_epi32(_mm512_srli_epi32(h, 6), 4)),
                };
                for (int k = 0; k < 4; ++k) {
                    const __m512 ds = _mm512_set1_ps(d * static_cast<float>(sc[c + 2 * k]));
                    const __m512 qf = _mm512_cvtepi32_ps(_mm512_sub_epi32(q[k], bias));
                    _mm512_storeu_ps(dst + 32 * k + 16 * c, _mm512_mul_ps(ds, qf));
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

float hsum16(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

// y[j * y_stride + i] = dot(w[i], x + j * cols) for i < NR, j < NT.
template <int NR, int NT>
void tile(const float* const* w, const float* x, int64_t cols, float* y, int64_t y_stride) {
    __m512 acc[NR][NT];
    for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m512 xv[NT];
        for (int j = 0; j < NT; ++j) xv[j] = _mm512_loadu_ps(x + j * cols + k);
        for (int i = 0; i < NR; ++i) {
            const __m512 wv = _mm512_loadu_ps(w[i] + k);
            for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    if (k < cols) {
        const __mmask16 mask = static_cast<__mmask16>((1u << (cols - k)) - 1);
        __m512 xv[NT];
        for (int j = 0; j < NT; ++j) xv[j] = _mm512_maskz_loadu_ps(mask, x + j * cols + k);
        for (int i = 0; i < NR; ++i) {
            const __m512 wv = _mm512_maskz_loadu_ps(mask, w[i] + k);
            for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) y[j * y_stride + i] = hsum16(acc[i][j]);
}

using TileFn = void (*)(const float* const*, const float*, int64_t, float*, int64_t);

template <int NR>
constexpr TileFn tile_for_tokens(int nt) {
    if constexpr (NR > kRowsMulti) {
        return &tile<NR, 1>;  // wide row tiles are only used for a single token
    } else {
        switch (nt) {
            case 1: return &tile<NR, 1>;
            case 2: return &tile<NR, 2>;
            case 3: return &tile<NR, 3>;
            default: return &tile<NR, 4>;
        }
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

}  // namespace

void matmul_rows_avx512(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const int max_rows = a.n_tokens == 1 ? kMaxRows : kRowsMulti;
    const bool direct = a.type == TensorType::F32;  // f32 rows are used in place
    thread_local std::vector<float> decoded;      // max_rows × cols, per worker
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
