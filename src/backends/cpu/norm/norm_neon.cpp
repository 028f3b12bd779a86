// RMSNorm on aarch64: the one 16-lane definition (norm_f32x16.h), the vector as four NEON registers (eight for the
// doubles).
#include "backends/cpu/norm/norm_f32x16.h"

namespace kvstash::kernels {

double sum_of_squares_neon(const float* x, int64_t n) { return simd::sum_of_squares(x, n); }

void scale_row_neon(const float* x, const float* weight, float scale, float* out, int64_t n) {
    simd::scale_row(x, weight, scale, out, n);
}

}  // namespace kvstash::kernels
