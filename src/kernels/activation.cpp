// SwiGLU's scalar reference and the choice of path.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#include "kernels/activation.h"

#include "kernels/exp_f32.h"

namespace kvstash {

namespace kernels::reference {
void swiglu(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        const float d = 1.0f + exp_f32(-g);
        out[i] = (g / d) * up[i];
    }
}
}  // namespace kernels::reference

void swiglu_with(Isa isa, const float* gate, const float* up, float* out, int64_t n) {
    switch (isa) {
        case Isa::avx512: kernels::swiglu_avx512(gate, up, out, n); return;
        case Isa::avx2: kernels::swiglu_avx2(gate, up, out, n); return;
        case Isa::scalar: break;
    }
    kernels::reference::swiglu(gate, up, out, n);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) { swiglu_with(active_isa(), gate, up, out, n); }

}  // namespace kvstash
