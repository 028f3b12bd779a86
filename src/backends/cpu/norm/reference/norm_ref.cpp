// RMSNorm's scalar reference: the lane structure of backends/cpu/norm/norm.h, which every ISA follows.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#include "backends/cpu/norm/norm.h"

namespace kvstash::kernels::reference {

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

}  // namespace kvstash::kernels::reference
