// AVX2 + FMA + F16C matmul, fused one-token tile (decode steps) on a quantized type: each weight block is
// decoded in registers and multiplied straight into the accumulators, 4 rows at a time, with a software
// prefetch of the weight stream. Bitwise the buffered tile's results (matmul_avx2.cpp, where the
// reduction order is given).
#pragma GCC optimize("fp-contract=off")  // decode mul-then-add exactly as written, never fused

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "backends/cpu/matmul/matmul_avx2_loads.h"
#include "backends/cpu/matmul/matmul_impl.h"

namespace kvstash::kernels {
namespace {

constexpr int kFusedRows = 4;              // rows decoded together by the fused one-token tile
constexpr int64_t kPrefetchBytes = 16384;  // least distance of the weight prefetch (bytes)

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

}  // namespace

void matmul_rows_fused_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    switch (a.type) {
        case TensorType::Q8_0: fused_rows<FusedQ8_0>(a, row_begin, row_end); return;
        case TensorType::Q4_0: fused_rows<FusedQ4_0>(a, row_begin, row_end); return;
        case TensorType::Q4_1: fused_rows<FusedQ4_1>(a, row_begin, row_end); return;
        case TensorType::Q4_K: fused_rows<FusedQ45_K<false>>(a, row_begin, row_end); return;
        case TensorType::Q5_K: fused_rows<FusedQ45_K<true>>(a, row_begin, row_end); return;
        case TensorType::Q6_K: fused_rows<FusedQ6_K>(a, row_begin, row_end); return;
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: return;  // the buffered tile (matmul_avx2.cpp)
    }
}

}  // namespace kvstash::kernels
