// SwiGLU: out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x). Elementwise, so batch-invariant.
#pragma once

#include <cstdint>

namespace kvstash {

void swiglu(const float* gate, const float* up, float* out, int64_t n);

}  // namespace kvstash
