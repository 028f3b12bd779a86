// AVX2 + FMA + F16C matmul with f32 activations. matmul() uses it for the float weight types (f32, f16,
// bf16); the block-quantized types take integer activations on every path (matmul_int8_avx2.cpp), and their
// decoders here serve kernel tests only. Each W row is decoded into an L1-resident f32 buffer with exactly the
// arithmetic of dequantize_row (so the decoded weights are bitwise the reference ones; f32 rows are read in
// place), then a buffered tile of up to 6 rows × 1 token or 2 rows × 2 tokens runs over k.
//
// Reduction order of one dot product: the canonical 16-lane one of the scalar reference
// (reference/matmul_ref.cpp, docs/architecture/canonical-matmul.md), two ymm registers per output:
//   lo, hi (lanes 0-7, 8-15) = 0; for k = 0, 16, 32, ...: lo = fma(w[k..k+7], x[k..k+7], lo),
//   hi = fma(w[k+8..k+15], x[k+8..k+15], hi) (a partial last chunk is loaded masked, zeros beyond cols);
//   result = hsum8(lo + hi), which is the tree of the AVX-512 hsum16. Hence bitwise equal to the scalar
//   reference and to the AVX-512 path for f32 / f16 / bf16 weights.
#pragma GCC optimize("fp-contract=off")  // decode mul-then-add exactly as written, never fused

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/matmul/matmul_avx2_loads.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/runtime/scratch.h"

namespace kvstash::kernels {
namespace {

constexpr int kMaxRows = 6;          // row tile when n_tokens == 1 (12 accumulators + 2 x + 1 w)
constexpr int kRowsMulti = 2;        // row tile when several tokens share the decoded rows
constexpr int kMaxTokens = 2;        // token tile (16 ymm registers: 8 accumulators + 4 x + operands)
constexpr int64_t kTokenBlock = 64;  // tokens per pass over a decoded row tile (keeps X in L2)

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

// ---- the buffered f32 tile ----

// y[j * y_stride + i] = dot(w[i], x + j * cols) for i < NR, j < NT; lanes 0-7 of the canonical 16 in lo,
// 8-15 in hi.
template <int NR, int NT>
void buffered_tile(const float* const* w, const float* x, int64_t cols, float* y, int64_t y_stride) {
    __m256 lo[NR][NT], hi[NR][NT];
    for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) lo[i][j] = hi[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m256 xl[NT], xh[NT];
        for (int j = 0; j < NT; ++j) {
            xl[j] = _mm256_loadu_ps(x + j * cols + k);
            xh[j] = _mm256_loadu_ps(x + j * cols + k + 8);
        }
        for (int i = 0; i < NR; ++i) {
            const __m256 wl = _mm256_loadu_ps(w[i] + k);
            for (int j = 0; j < NT; ++j) lo[i][j] = _mm256_fmadd_ps(wl, xl[j], lo[i][j]);
            const __m256 wh = _mm256_loadu_ps(w[i] + k + 8);
            for (int j = 0; j < NT; ++j) hi[i][j] = _mm256_fmadd_ps(wh, xh[j], hi[i][j]);
        }
    }
    if (k < cols) {  // lanes at or past cols load zeros: fma(0, 0, acc) as in the reference
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i left = _mm256_set1_epi32(static_cast<int>(cols - k));
        const __m256i mask_lo = _mm256_cmpgt_epi32(left, lane);
        const __m256i mask_hi = _mm256_cmpgt_epi32(left, _mm256_add_epi32(lane, _mm256_set1_epi32(8)));
        __m256 xl[NT], xh[NT];
        for (int j = 0; j < NT; ++j) {
            xl[j] = _mm256_maskload_ps(x + j * cols + k, mask_lo);
            xh[j] = _mm256_maskload_ps(x + j * cols + k + 8, mask_hi);
        }
        for (int i = 0; i < NR; ++i) {
            const __m256 wl = _mm256_maskload_ps(w[i] + k, mask_lo);
            const __m256 wh = _mm256_maskload_ps(w[i] + k + 8, mask_hi);
            for (int j = 0; j < NT; ++j) {
                lo[i][j] = _mm256_fmadd_ps(wl, xl[j], lo[i][j]);
                hi[i][j] = _mm256_fmadd_ps(wh, xh[j], hi[i][j]);
            }
        }
    }
    for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) y[j * y_stride + i] = hsum8(_mm256_add_ps(lo[i][j], hi[i][j]));
}

using BufferedTileFn = void (*)(const float* const*, const float*, int64_t, float*, int64_t);

template <int NR>
constexpr BufferedTileFn buffered_tile_for_tokens(int nt) {
    if constexpr (NR > kRowsMulti || kMaxTokens == 1) {
        return &buffered_tile<NR, 1>;  // wide row tiles are only used for a single token
    } else {
        return nt == 1 ? &buffered_tile<NR, 1> : &buffered_tile<NR, kMaxTokens>;
    }
}

BufferedTileFn buffered_tile_for(int nr, int nt) {
    switch (nr) {
        case 1: return buffered_tile_for_tokens<1>(nt);
        case 2: return buffered_tile_for_tokens<2>(nt);
        case 3: return buffered_tile_for_tokens<3>(nt);
        case 4: return buffered_tile_for_tokens<4>(nt);
        case 5: return buffered_tile_for_tokens<5>(nt);
        default: return buffered_tile_for_tokens<6>(nt);
    }
}

}  // namespace

void matmul_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const int max_rows = a.n_tokens == 1 ? kMaxRows : kRowsMulti;
    const bool direct = a.type == TensorType::F32;  // f32 rows are used in place
    thread_local ScratchArray decoded_buf;          // max_rows × cols, per worker
    float* decoded = direct ? nullptr : decoded_buf.floats(static_cast<size_t>(max_rows * a.cols));
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
                    float* dst = decoded + i * a.cols;
                    decode_row(a.type, src, dst, a.cols);
                    w[i] = dst;
                }
            }
            for (int64_t t = t0; t < t_end; t += kMaxTokens) {
                const int nt = static_cast<int>(std::min<int64_t>(kMaxTokens, t_end - t));
                buffered_tile_for(nr, nt)(w, a.X + t * a.cols, a.cols, a.Y + t * a.y_stride + r, a.y_stride);
            }
        }
    }
}

}  // namespace kvstash::kernels