// The activation quantizer on AVX-512 (backends/cpu/matmul/quantize_act.h), compiled for AVX-512 F/BW/VL/DQ and used
// by both AVX-512 integer paths, with and without VNNI (backends/cpu/runtime/dispatch.cpp).
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/matmul_int8_avx512vnni.h"

namespace kvstash::kernels {

// Bitwise the scalar quantize_activation_row (see quantize_act.h): max of |x| (exact in any order; NaN
// lanes are skipped as std::max skips them), the same scale and reciprocal computed in scalar, then
// per 16 elements the same product, rounding add and integer steps.
void quantize_activation_row_avx512(const float* x, int64_t cols, int64_t block, int8_t* h, int8_t* l, float* d,
                                    int32_t* h32, int32_t* l32, int32_t* h16, int32_t* l16) {
    constexpr auto kMax = static_cast<float>(kActivationMax);
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    for (int64_t b0 = 0; b0 < cols; b0 += block) {
        __m512 m = _mm512_setzero_ps();
        for (int64_t i = b0; i < b0 + block; i += 16) {
            m = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(x + i), abs_mask), m);  // NaN lanes keep m
        }
        const float amax = _mm512_reduce_max_ps(m);
        const float scale = amax / kMax;
        const float inv = amax > 0.0f ? kMax / amax : 0.0f;
        d[b0 / block] = scale;
        const __m512 vinv = _mm512_set1_ps(inv), magic = _mm512_set1_ps(12582912.0f);
        const __m512i bias = _mm512_set1_epi32(0x4B400000), lo = _mm512_set1_epi32(-kActivationMax),
                      hi = _mm512_set1_epi32(kActivationMax), half = _mm512_set1_epi32(128),
                      byte = _mm512_set1_epi32(0xFF);
        for (int64_t i = b0; i < b0 + block; i += 16) {
            const __m512 shifted = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv), magic);
            const __m512i q =
                _mm512_max_epi32(lo, _mm512_min_epi32(hi, _mm512_sub_epi32(_mm512_castps_si512(shifted), bias)));
            const __m512i low = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(q, half), byte), half);
            const __m512i high = _mm512_srai_epi32(_mm512_sub_epi32(q, low), 8);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(l + i), _mm512_cvtepi32_epi8(low));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), _mm512_cvtepi32_epi8(high));
            h16[i / 16] = _mm512_reduce_add_epi32(high);
            l16[i / 16] = _mm512_reduce_add_epi32(low);
        }
    }
    for (int64_t i = 0; i < cols / 32; ++i) {
        h32[i] = h16[2 * i] + h16[2 * i + 1];
        l32[i] = l16[2 * i] + l16[2 * i + 1];
    }
}

}  // namespace kvstash::kernels
