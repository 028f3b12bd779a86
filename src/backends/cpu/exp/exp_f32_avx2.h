// exp_f32 (backends/cpu/exp/exp_f32.h) on 8 lanes: the scalar reference's operation sequence, step for step.
// Include only from *_avx2.cpp files (compiled with -mavx2 -mfma).
#pragma once

#include <immintrin.h>

#include "backends/cpu/exp/exp_f32.h"

namespace kvstash::kernels {

inline __m256 exp_f32_avx2(__m256 x) {
    using namespace exp_f32_constants;
    const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(kMinInput));
    xc = _mm256_min_ps(xc, _mm256_set1_ps(kMaxInput));
    const __m256 n =
        _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 minus_n = _mm256_xor_ps(n, _mm256_set1_ps(-0.0f));
    __m256 r = _mm256_fmadd_ps(minus_n, _mm256_set1_ps(kLn2Hi), xc);
    r = _mm256_fmadd_ps(minus_n, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kC7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC0));
    const __m256i ni = _mm256_cvtps_epi32(n);  // exact: n is an integer
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 scale1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 scale2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, scale1), scale2);
    return _mm256_blendv_ps(y, x, is_nan);
}

}  // namespace kvstash::kernels
