// SwiGLU on aarch64: the one 16-lane definition (activation_f32x16.h), as four NEON registers.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include "backends/cpu/activation/activation_f32x16.h"

namespace kvstash::kernels {

void swiglu_neon(const float* gate, const float* up, float* out, int64_t n) { simd::swiglu(gate, up, out, n); }

}  // namespace kvstash::kernels
