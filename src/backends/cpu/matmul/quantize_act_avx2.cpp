// The activation quantizer on AVX2 (backends/cpu/matmul/quantize_act.h), used with the AVX2 integer kernels
// (matmul_int8_avx2.cpp).
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include <immintrin.h>

#include "backends/cpu/matmul/quantize_act.h"

namespace kvstash::kernels {
namespace {

int32_t sum_lanes(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

float max_lanes(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// 32 int32 values (each in [-128, 127]) as 32 int8 in order.
__m256i pack_bytes(const __m256i v[4]) {
    const __m256i words = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    // dword order now: v0[0-3], v1[0-3], v2[0-3], v3[0-3], v0[4-7], v1[4-7], v2[4-7], v3[4-7]
    return _mm256_permutevar8x32_epi32(words, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

}  // namespace

// Bitwise the scalar quantize_activation_row: max of |x| (exact in any order; NaN lanes are skipped as
// std::max skips them: vmaxps returns its second operand, the running max, when the first is NaN), the
// same scale and reciprocal computed in scalar, then per 8 elements the same product, rounding add and
// integer steps.
void quantize_activation_row_avx2(const float* x, int64_t cols, int64_t block, int8_t* h, int8_t* l, float* d,
                                  int32_t* h32, int32_t* l32, int32_t* h16, int32_t* l16) {
    constexpr auto kMax = static_cast<float>(kActivationMax);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    const __m256i bias = _mm256_set1_epi32(0x4B400000), lo = _mm256_set1_epi32(-kActivationMax),
                  hi = _mm256_set1_epi32(kActivationMax), half = _mm256_set1_epi32(128), byte = _mm256_set1_epi32(0xFF);
    for (int64_t b0 = 0; b0 < cols; b0 += block) {
        __m256 m = _mm256_setzero_ps();
        for (int64_t i = b0; i < b0 + block; i += 8) {
            m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), m);  // NaN lanes keep m
        }
        const float amax = max_lanes(m);
        const float scale = amax / kMax;
        const float inv = amax > 0.0f ? kMax / amax : 0.0f;
        d[b0 / block] = scale;
        const __m256 vinv = _mm256_set1_ps(inv);
        for (int64_t i = b0; i < b0 + block; i += 32) {
            __m256i low[4], high[4];
            for (int j = 0; j < 4; ++j) {
                const __m256 shifted = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), vinv), magic);
                const __m256i q =
                    _mm256_max_epi32(lo, _mm256_min_epi32(hi, _mm256_sub_epi32(_mm256_castps_si256(shifted), bias)));
                low[j] = _mm256_sub_epi32(_mm256_and_si256(_mm256_add_epi32(q, half), byte), half);
                high[j] = _mm256_srai_epi32(_mm256_sub_epi32(q, low[j]), 8);
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(l + i), pack_bytes(low));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + i), pack_bytes(high));
            for (int j = 0; j < 2; ++j) {
                h16[(i + 16 * j) / 16] = sum_lanes(_mm256_add_epi32(high[2 * j], high[2 * j + 1]));
                l16[(i + 16 * j) / 16] = sum_lanes(_mm256_add_epi32(low[2 * j], low[2 * j + 1]));
            }
        }
    }
    for (int64_t i = 0; i < cols / 32; ++i) {
        h32[i] = h16[2 * i] + h16[2 * i + 1];
        l32[i] = l16[2 * i] + l16[2 * i + 1];
    }
}

}  // namespace kvstash::kernels
