// GELU's scalar reference (backends/cpu/activation/gelu.h): the operation sequence every ISA follows.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#include "backends/cpu/activation/gelu.h"
#include "backends/cpu/exp/exp_f32.h"

namespace kvstash::kernels::reference {

void gelu(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        const float p = kGeluA + kGeluB * (v * v);
        const float u = v * p;
        const float d = 1.0f + exp_f32(-u);
        out[i] = v / d;
    }
}

}  // namespace kvstash::kernels::reference
