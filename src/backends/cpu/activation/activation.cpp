// SwiGLU on the process's or a given instruction set (the reference: reference/activation_ref.cpp).
#include "backends/cpu/activation/activation.h"

namespace kvstash {

void swiglu_with(Isa isa, const float* gate, const float* up, float* out, int64_t n) {
    kernels::kernel_table(isa).swiglu(gate, up, out, n);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) { swiglu_with(active_isa(), gate, up, out, n); }

}  // namespace kvstash
