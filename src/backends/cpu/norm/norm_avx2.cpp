// RMSNorm on AVX2 (backends/cpu/norm/norm.h): the 16 partial sums in four registers of 4 doubles.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/norm/norm.h"

namespace kvstash::kernels {

double sum_of_squares_avx2(const float* x, int64_t n) {
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    // acc[q] lane l holds partial sum 4q + l. fma(x, x, acc) == acc + x·x: the square is exact in double.
    auto add16 = [&acc](const float* p) {
        for (int half = 0; half < 2; ++half) {
            const __m256 v = _mm256_loadu_ps(p + 8 * half);
            const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
            const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
            acc[2 * half] = _mm256_fmadd_pd(lo, lo, acc[2 * half]);
            acc[2 * half + 1] = _mm256_fmadd_pd(hi, hi, acc[2 * half + 1]);
        }
    };
    int64_t i = 0;
    for (; i + kRmsNormLanes <= n; i += kRmsNormLanes) add16(x + i);
    if (i < n) {  // zeros past the end add +0 squares: the partial sums keep their bits
        float tail[kRmsNormLanes] = {};
        std::copy(x + i, x + n, tail);
        add16(tail);
    }
    const __m256d s4 = _mm256_add_pd(_mm256_add_pd(acc[0], acc[2]), _mm256_add_pd(acc[1], acc[3]));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(s2) + _mm_cvtsd_f64(_mm_unpackhi_pd(s2, s2));
}

void scale_row_avx2(const float* x, const float* weight, float scale, float* out, int64_t n) {
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(weight + i), _mm256_mul_ps(_mm256_loadu_ps(x + i), s)));
    }
    reference::scale_row(x + i, weight + i, scale, out + i, n - i);
}

}  // namespace kvstash::kernels
