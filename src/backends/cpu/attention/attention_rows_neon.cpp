// The attention row operations on aarch64: the one 16-lane definition (attention_rows_f32x16.h), as four NEON
// registers.
#include "backends/cpu/attention/attention_rows_f32x16.h"

namespace kvstash::kernels {

float attention_dot_neon(const float* q, const uint8_t* k_row, int64_t n, TensorType type) {
    return simd::attention_dot(q, k_row, n, type);
}

void attention_axpy_neon(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type) {
    simd::attention_axpy(out, w, v_row, n, type);
}

}  // namespace kvstash::kernels
