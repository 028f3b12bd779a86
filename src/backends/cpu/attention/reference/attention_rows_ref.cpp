// The scalar attention row operations (backends/cpu/attention/attention_rows.h): one sequential sum per row, the
// reference the SIMD paths are tested against; the SIMD paths also use them for a head's tail elements.
#include "backends/cpu/attention/attention_rows.h"

namespace kvstash::kernels {
namespace reference {

namespace {
inline float load(const uint8_t* row, int64_t i, TensorType type) {
    if (type == TensorType::F16) return fp16_to_fp32(reinterpret_cast<const uint16_t*>(row)[i]);
    if (type == TensorType::Q8_0) return q8_0_value(row, i);
    return reinterpret_cast<const float*>(row)[i];
}
}  // namespace

float attention_dot(const float* q, const uint8_t* k_row, int64_t n, TensorType type) {
    float dot = 0.0f;
    for (int64_t i = 0; i < n; ++i) dot += q[i] * load(k_row, i, type);
    return dot;
}

void attention_axpy(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type) {
    for (int64_t i = 0; i < n; ++i) out[i] += w * load(v_row, i, type);
}

}  // namespace reference

}  // namespace kvstash::kernels
