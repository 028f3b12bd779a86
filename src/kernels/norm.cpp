// RMSNorm's scalar reference (the lane structure of kernels/norm.h) and the choice of path.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#include "kernels/norm.h"

#include <cmath>

namespace kvstash {

namespace kernels::reference {
double sum_of_squares(const float* x, int64_t n) {
    double acc[kRmsNormLanes] = {};
    for (int64_t i = 0; i < n; ++i) {
        const auto xi = static_cast<double>(x[i]);
        acc[i % kRmsNormLanes] += xi * xi;
    }
    for (int width = kRmsNormLanes / 2; width >= 1; width /= 2) {
        for (int k = 0; k < width; ++k) acc[k] += acc[k + width];
    }
    return acc[0];
}

void scale_row(const float* x, const float* weight, float scale, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * scale);
}
}  // namespace kernels::reference

double kernels::sum_of_squares(Isa isa, const float* x, int64_t n) {
    switch (isa) {
        case Isa::avx512: return sum_of_squares_avx512(x, n);
        case Isa::avx2: return sum_of_squares_avx2(x, n);
        case Isa::scalar: break;
    }
    return reference::sum_of_squares(x, n);
}

void rms_norm_row_with(Isa isa, const float* x, const float* weight, float* out, int64_t n, float eps) {
    const double sum_sq = kernels::sum_of_squares(isa, x, n);
    const float mean = static_cast<float>(sum_sq / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    switch (isa) {
        case Isa::avx512: kernels::scale_row_avx512(x, weight, scale, out, n); return;
        case Isa::avx2: kernels::scale_row_avx2(x, weight, scale, out, n); return;
        case Isa::scalar: break;
    }
    kernels::reference::scale_row(x, weight, scale, out, n);
}

void rms_norm_row(const float* x, const float* weight, float* out, int64_t n, float eps) {
    rms_norm_row_with(active_isa(), x, weight, out, n, eps);
}

}  // namespace kvstash
