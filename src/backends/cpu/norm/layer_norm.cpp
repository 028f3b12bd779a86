// LayerNorm of one row (backends/cpu/norm/layer_norm.h): the centring and bias are scalar (one pass each over n
// values); the sum of squares and the scaling use RMSNorm's per-ISA kernels, which give the same bits
// on every ISA.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#include "backends/cpu/norm/layer_norm.h"

#include <cmath>

#include "backends/cpu/norm/norm.h"

namespace kvstash {

void layer_norm_row_with(Isa isa, const float* x, const float* weight, const float* bias, float* out, int64_t n,
                         float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] - mean;
    const kernels::KernelTable& table = kernels::kernel_table(isa);
    const double sum_sq = table.sum_of_squares(out, n);
    const float variance = static_cast<float>(sum_sq / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(variance + eps);
    table.scale_row(out, weight, scale, out, n);
    if (bias) {
        for (int64_t i = 0; i < n; ++i) out[i] += bias[i];
    }
}

void layer_norm_row(const float* x, const float* weight, const float* bias, float* out, int64_t n, float eps) {
    layer_norm_row_with(active_isa(), x, weight, bias, out, n, eps);
}

}  // namespace kvstash
