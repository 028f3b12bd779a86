// exp_f32_shifted_row on AVX2: 8 lanes at a time, the tail through a masked load and store.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include "backends/cpu/exp/exp_f32_avx2.h"

namespace kvstash::kernels {

void exp_f32_shifted_row_avx2(const float* in, float* out, int64_t n, float shift) {
    const __m256 s = _mm256_set1_ps(shift);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, exp_f32_avx2(_mm256_sub_ps(_mm256_loadu_ps(in + j), s)));
    if (j < n) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n - j)), lane);
        const __m256 e = exp_f32_avx2(_mm256_sub_ps(_mm256_maskload_ps(in + j, mask), s));
        _mm256_maskstore_ps(out + j, mask, e);
    }
}

}  // namespace kvstash::kernels
