// GELU, tanh approximation (GPT-2's "gelu_new", llama.cpp's ggml_gelu):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³)))  =  x · sigmoid(2 sqrt(2/pi) (x + 0.044715 x³))
// computed in the sigmoid form (no cancellation in 1 + tanh for negative x). Elementwise, so
// batch-invariant. One operation sequence, the same bits on every ISA (tests/unit/gelu_test.cpp):
//   x2 = x * x;  p = kA + kB * x2  (kA = 2 sqrt(2/pi), kB = kA · 0.044715);  u = x * p
//   e = exp_f32(-u)  (backends/cpu/exp/exp_f32.h);  d = 1 + e;  out = x / d
// x / d with d = +inf (u below -89) gives -0 or 0, as the limit. out may alias x.
#pragma once

#include <cstdint>

#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {

// On the process's instruction set; _with: on `isa` (one of available_isas(), not checked). The AVX-512
// path is the AVX2 one (16 lanes as two ymm registers, the same bits): this runs on n_ff values per token, next to
// matmuls of n_ff × n_embd.
void gelu(const float* x, float* out, int64_t n);
void gelu_with(Isa isa, const float* x, float* out, int64_t n);

namespace kernels {
inline constexpr float kGeluA = 1.5957691216057308f;    // 2 sqrt(2/pi)
inline constexpr float kGeluB = 0.071354816272919870f;  // 2 sqrt(2/pi) · 0.044715
namespace reference {
void gelu(const float* x, float* out, int64_t n);
}  // namespace reference
void gelu_avx2(const float* x, float* out, int64_t n);
void gelu_neon(const float* x, float* out, int64_t n);  // aarch64 (gelu_neon.cpp)
}  // namespace kernels

}  // namespace kvstash
