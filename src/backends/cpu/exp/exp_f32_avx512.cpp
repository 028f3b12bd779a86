// exp_f32_shifted_row on AVX-512: 16 lanes at a time, the tail through a masked load and store.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include "backends/cpu/exp/exp_f32_avx512.h"

namespace kvstash::kernels {

void exp_f32_shifted_row_avx512(const float* in, float* out, int64_t n, float shift) {
    const __m512 s = _mm512_set1_ps(shift);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(out + j, exp_f32_avx512(_mm512_sub_ps(_mm512_loadu_ps(in + j), s)));
    if (j < n) {
        const auto mask = static_cast<__mmask16>((1u << (n - j)) - 1);
        const __m512 e = exp_f32_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, in + j), s));
        _mm512_mask_storeu_ps(out + j, mask, e);
    }
}

}  // namespace kvstash::kernels
