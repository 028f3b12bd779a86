// RMSNorm on AVX-512 (backends/cpu/norm/norm.h): the 16 partial sums in two registers of 8 doubles.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backends/cpu/norm/norm.h"

namespace kvstash::kernels {

double sum_of_squares_avx512(const float* x, int64_t n) {
    __m512d lo_acc = _mm512_setzero_pd();  // partial sums 0..7
    __m512d hi_acc = _mm512_setzero_pd();  // partial sums 8..15
    // fma(x, x, acc) == acc + x·x: the square is exact in double.
    auto add16 = [&](__m512 v) {
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
        lo_acc = _mm512_fmadd_pd(lo, lo, lo_acc);
        hi_acc = _mm512_fmadd_pd(hi, hi, hi_acc);
    };
    int64_t i = 0;
    for (; i + kRmsNormLanes <= n; i += kRmsNormLanes) add16(_mm512_loadu_ps(x + i));
    // Zeros past the end add +0 squares: the partial sums keep their bits.
    if (i < n) add16(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (n - i)) - 1), x + i));
    const __m512d s8 = _mm512_add_pd(lo_acc, hi_acc);
    const __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(s8), _mm512_extractf64x4_pd(s8, 1));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(s2) + _mm_cvtsd_f64(_mm_unpackhi_pd(s2, s2));
}

void scale_row_avx512(const float* x, const float* weight, float scale, float* out, int64_t n) {
    const __m512 s = _mm512_set1_ps(scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(weight + i), _mm512_mul_ps(_mm512_loadu_ps(x + i), s)));
    }
    if (i < n) {
        const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 xs = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + i), s);
        _mm512_mask_storeu_ps(out + i, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, weight + i), xs));
    }
}

}  // namespace kvstash::kernels
