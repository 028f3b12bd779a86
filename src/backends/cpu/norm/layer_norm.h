// LayerNorm with bias (GPT-2): out[i] = weight[i] * ((x[i] - mean) * scale) + bias[i],
// mean = mean(x), scale = 1 / sqrt(mean((x - mean)²) + eps), over one row of n values.
//
// One operation sequence, so the bits depend on the row alone (batch-invariant) and every ISA gives the
// same (tests/unit/layer_norm_test.cpp):
//   sum  = Σ double(x[i]) in increasing i;          mean = float(sum / n)
//   c[i] = x[i] - mean                              (into out)
//   ssq  = kernels::sum_of_squares(isa, c, n)       (backends/cpu/norm/norm.h: the same bits on every ISA)
//   var  = float(ssq / n);  scale = 1.0f / sqrtf(var + eps)
//   out[i] = weight[i] * (c[i] * scale)             (norm.h's scale_row), then out[i] += bias[i]
// The same steps as llama.cpp's ggml_norm (double sums) followed by its weight multiply and bias add.
#pragma once

#include <cstdint>

#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {

// On the process's instruction set; _with: on `isa` (one of available_isas(), not checked). out may
// alias x. bias may be nullptr (no bias).
void layer_norm_row(const float* x, const float* weight, const float* bias, float* out, int64_t n, float eps);
void layer_norm_row_with(Isa isa, const float* x, const float* weight, const float* bias, float* out, int64_t n,
                         float eps);

}  // namespace kvstash
