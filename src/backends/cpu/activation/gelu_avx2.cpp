// GELU on AVX2: the one 16-lane definition (activation_f32x16.h), as two ymm registers.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (no fma)

#include "backends/cpu/activation/activation_f32x16.h"

namespace kvstash::kernels {

void gelu_avx2(const float* x, float* out, int64_t n) { simd::gelu(x, out, n); }

}  // namespace kvstash::kernels
