// GELU on the process's or a given instruction set (backends/cpu/activation/gelu.h; the reference:
// reference/gelu_ref.cpp).
#include "backends/cpu/activation/gelu.h"

namespace kvstash {

void gelu_with(Isa isa, const float* x, float* out, int64_t n) {
#if KVSTASH_HAVE_X86_KERNELS
    if (isa != Isa::scalar) {
        kernels::gelu_avx2(x, out, n);  // AVX-512 CPUs run the AVX2 path (gelu.h)
        return;
    }
#elif KVSTASH_HAVE_NEON_KERNELS
    if (isa == Isa::neon) {
        kernels::gelu_neon(x, out, n);
        return;
    }
#else
    (void)isa;  // only the scalar path here
#endif
    kernels::reference::gelu(x, out, n);
}

void gelu(const float* x, float* out, int64_t n) { gelu_with(active_isa(), x, out, n); }

}  // namespace kvstash
