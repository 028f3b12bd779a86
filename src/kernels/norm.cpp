#include "kernels/norm.h"

#include <cmath>

namespace kvstash {

void rms_norm_row(const float* x, const float* weight, float* out, int64_t n, float eps) {
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
    const float mean = static_cast<float>(sum_sq / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * scale);
}

}  // namespace kvstash
