// GELU on AVX2, 8 lanes: the reference's sequence (backends/cpu/activation/gelu.h); the tail masked.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (no fma)

#include "backends/cpu/activation/gelu.h"
#include "backends/cpu/exp/exp_f32_avx2.h"

namespace kvstash::kernels {
namespace {
inline __m256 gelu8(__m256 x) {
    const __m256 p = _mm256_add_ps(_mm256_set1_ps(kGeluA), _mm256_mul_ps(_mm256_set1_ps(kGeluB), _mm256_mul_ps(x, x)));
    const __m256 u = _mm256_mul_ps(x, p);
    const __m256 e = exp_f32_avx2(_mm256_xor_ps(u, _mm256_set1_ps(-0.0f)));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}
}  // namespace

void gelu_avx2(const float* x, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, gelu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n - i)), lane);
        _mm256_maskstore_ps(out + i, mask, gelu8(_mm256_maskload_ps(x + i, mask)));
    }
}

}  // namespace kvstash::kernels
