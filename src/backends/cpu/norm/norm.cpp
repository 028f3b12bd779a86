// RMSNorm of one row on a given instruction set (backends/cpu/norm/norm.h; the reference: reference/norm_ref.cpp).
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#include "backends/cpu/norm/norm.h"

#include <cmath>

namespace kvstash {

double kernels::sum_of_squares(Isa isa, const float* x, int64_t n) { return kernel_table(isa).sum_of_squares(x, n); }

void rms_norm_row_with(Isa isa, const float* x, const float* weight, float* out, int64_t n, float eps) {
    const kernels::KernelTable& table = kernels::kernel_table(isa);
    const double sum_sq = table.sum_of_squares(x, n);
    const float mean = static_cast<float>(sum_sq / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    table.scale_row(x, weight, scale, out, n);
}

void rms_norm_row(const float* x, const float* weight, float* out, int64_t n, float eps) {
    rms_norm_row_with(active_isa(), x, weight, out, n, eps);
}

}  // namespace kvstash
