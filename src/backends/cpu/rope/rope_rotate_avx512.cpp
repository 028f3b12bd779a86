// RoPE's rotation on AVX-512 (backends/cpu/rope/rope_rotate.h): 8 pairs (normal) or 16 pairs (neox) per step,
// the remaining pairs by the scalar reference (same operations).
#pragma GCC optimize("fp-contract=off")  // products rounded before the add or subtract, never fused

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backends/cpu/rope/rope_rotate.h"

namespace kvstash::kernels {

void rope_rotate_avx512(RopeLayout layout, float* v, int64_t half, int64_t begin, const float* cos_v,
                        const float* sin_v) {
    int64_t i = begin;
    if (layout == RopeLayout::normal) {
        // Lanes (2k, 2k+1) hold pair k: t1 = x·cos, t2 = swapped x·sin; even lanes t1 - t2 (x0·c - x1·s),
        // odd lanes t1 + t2 (x1·c + x0·s).
        const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        constexpr __mmask16 kOdd = 0xAAAA;
        for (; i + 8 <= half; i += 8) {
            const __m512 x = _mm512_loadu_ps(v + 2 * i);
            const __m512 c = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(cos_v + i)));
            const __m512 s = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(sin_v + i)));
            const __m512 swapped = _mm512_permute_ps(x, _MM_SHUFFLE(2, 3, 0, 1));
            const __m512 t1 = _mm512_mul_ps(x, c);
            const __m512 t2 = _mm512_mul_ps(swapped, s);
            _mm512_storeu_ps(v + 2 * i, _mm512_mask_add_ps(_mm512_sub_ps(t1, t2), kOdd, t1, t2));
        }
    } else {
        for (; i + 16 <= half; i += 16) {
            const __m512 x0 = _mm512_loadu_ps(v + i);
            const __m512 x1 = _mm512_loadu_ps(v + half + i);
            const __m512 c = _mm512_loadu_ps(cos_v + i);
            const __m512 s = _mm512_loadu_ps(sin_v + i);
            _mm512_storeu_ps(v + i, _mm512_sub_ps(_mm512_mul_ps(x0, c), _mm512_mul_ps(x1, s)));
            _mm512_storeu_ps(v + half + i, _mm512_add_ps(_mm512_mul_ps(x0, s), _mm512_mul_ps(x1, c)));
        }
    }
    reference::rope_rotate(layout, v, half, i, cos_v, sin_v);
}

}  // namespace kvstash::kernels
