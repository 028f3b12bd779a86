// SwiGLU's scalar reference (backends/cpu/activation/activation.h): the operation sequence every ISA follows.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/exp/exp_f32.h"

namespace kvstash::kernels::reference {

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        const float d = 1.0f + exp_f32(-g);
        out[i] = (g / d) * up[i];
    }
}

}  // namespace kvstash::kernels::reference
