// exp_f32 (backends/cpu/exp/exp_f32.h) on 16 lanes: the scalar reference's operation sequence, step for step.
// Include only from *_avx512.cpp files (compiled with -mavx512f and friends).
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backends/cpu/exp/exp_f32.h"

namespace kvstash::kernels {

inline __m512 exp_f32_avx512(__m512 x) {
    using namespace exp_f32_constants;
    const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m512 xc = _mm512_max_ps(x, _mm512_set1_ps(kMinInput));
    xc = _mm512_min_ps(xc, _mm512_set1_ps(kMaxInput));
    const __m512 n =
        _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 minus_n = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(n), _mm512_set1_epi32(INT32_MIN)));
    __m512 r = _mm512_fmadd_ps(minus_n, _mm512_set1_ps(kLn2Hi), xc);
    r = _mm512_fmadd_ps(minus_n, _mm512_set1_ps(kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kC7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC0));
    const __m512i ni = _mm512_cvtps_epi32(n);  // exact: n is an integer
    const __m512i n1 = _mm512_srai_epi32(ni, 1);
    const __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 scale1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const __m512 scale2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    const __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, scale1), scale2);
    return _mm512_mask_blend_ps(is_nan, y, x);
}

}  // namespace kvstash::kernels
