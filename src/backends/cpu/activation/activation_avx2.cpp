// SwiGLU on AVX2, 8 lanes: the reference's sequence (backends/cpu/activation/activation.h); the tail masked.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/exp/exp_f32_avx2.h"

namespace kvstash::kernels {
namespace {
inline __m256 swiglu8(__m256 g, __m256 up) {
    const __m256 e = exp_f32_avx2(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), up);
}
}  // namespace

void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n - i)), lane);
        const __m256 y = swiglu8(_mm256_maskload_ps(gate + i, mask), _mm256_maskload_ps(up + i, mask));
        _mm256_maskstore_ps(out + i, mask, y);
    }
}

}  // namespace kvstash::kernels
