// SwiGLU on AVX-512, 16 lanes: the reference's sequence (backends/cpu/activation/activation.h); the tail masked.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/exp/exp_f32_avx512.h"

namespace kvstash::kernels {
namespace {
inline __m512 swiglu16(__m512 g, __m512 up) {
    const __m512i sign = _mm512_set1_epi32(INT32_MIN);
    const __m512 e = exp_f32_avx512(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign)));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), up);
}
}  // namespace

void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(out + i, swiglu16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    }
    if (i < n) {
        const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 y = swiglu16(_mm512_maskz_loadu_ps(mask, gate + i), _mm512_maskz_loadu_ps(mask, up + i));
        _mm512_mask_storeu_ps(out + i, mask, y);
    }
}

}  // namespace kvstash::kernels
