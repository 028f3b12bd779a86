// SwiGLU: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g). Elementwise, so batch-invariant.
// One operation sequence, the same bits on every ISA (tests/unit/activation_test.cpp):
//   e = exp_f32(-g)  (backends/cpu/exp/exp_f32.h);  d = 1 + e;  s = g / d;  out = s * up
// out may alias gate or up.
#pragma once

#include <cstdint>

#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {

// On the process's instruction set (backends/cpu/runtime/dispatch.h); _with: on `isa`, which must be one of
// available_isas() (not checked here, unlike matmul_with: these run per row).
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void swiglu_with(Isa isa, const float* gate, const float* up, float* out, int64_t n);

namespace kernels {
namespace reference {
void swiglu(const float* gate, const float* up, float* out, int64_t n);
}  // namespace reference
void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n);
void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n);
void swiglu_neon(const float* gate, const float* up, float* out, int64_t n);  // aarch64
}  // namespace kernels

}  // namespace kvstash
