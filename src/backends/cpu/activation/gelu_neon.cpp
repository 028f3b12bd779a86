// GELU on aarch64: the one 16-lane definition (activation_f32x16.h), as four NEON registers.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include "backends/cpu/activation/activation_f32x16.h"

namespace kvstash::kernels {

void gelu_neon(const float* x, float* out, int64_t n) { simd::gelu(x, out, n); }

}  // namespace kvstash::kernels
