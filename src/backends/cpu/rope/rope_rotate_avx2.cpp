// RoPE's rotation on AVX2 (backends/cpu/rope/rope_rotate.h): 4 pairs (normal) or 8 pairs (neox) per step, the
// remaining pairs by the scalar reference (same operations).
#pragma GCC optimize("fp-contract=off")  // products rounded before the add or subtract, never fused

#include <immintrin.h>

#include "backends/cpu/rope/rope_rotate.h"

namespace kvstash::kernels {

void rope_rotate_avx2(RopeLayout layout, float* v, int64_t half, int64_t begin, const float* cos_v,
                      const float* sin_v) {
    int64_t i = begin;
    if (layout == RopeLayout::normal) {
        // Lanes (2k, 2k+1) hold pair k: t1 = x·cos, t2 = swapped x·sin; even lanes t1 - t2 (x0·c - x1·s),
        // odd lanes t1 + t2 (x1·c + x0·s) -- addsub does exactly that.
        const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
        for (; i + 4 <= half; i += 4) {
            const __m256 x = _mm256_loadu_ps(v + 2 * i);
            const __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cos_v + i)), dup);
            const __m256 s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sin_v + i)), dup);
            const __m256 swapped = _mm256_permute_ps(x, _MM_SHUFFLE(2, 3, 0, 1));
            _mm256_storeu_ps(v + 2 * i, _mm256_addsub_ps(_mm256_mul_ps(x, c), _mm256_mul_ps(swapped, s)));
        }
    } else {
        for (; i + 8 <= half; i += 8) {
            const __m256 x0 = _mm256_loadu_ps(v + i);
            const __m256 x1 = _mm256_loadu_ps(v + half + i);
            const __m256 c = _mm256_loadu_ps(cos_v + i);
            const __m256 s = _mm256_loadu_ps(sin_v + i);
            _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)));
            _mm256_storeu_ps(v + half + i, _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c)));
        }
    }
    reference::rope_rotate(layout, v, half, i, cos_v, sin_v);
}

}  // namespace kvstash::kernels
