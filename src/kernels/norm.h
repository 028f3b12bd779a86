// RMSNorm: out[i] = weight[i] * (x[i] / sqrt(mean(x²) + eps)), one row of n values.
// The mean is accumulated in double, sequentially, so it depends on the row alone.
#pragma once

#include <cstdint>

namespace kvstash {

void rms_norm_row(const float* x, const float* weight, float* out, int64_t n, float eps);

}  // namespace kvstash
