// The scalar attention row operations (backends/cpu/attention/attention_rows.h): the definition every ISA gives
// bitwise. The dot product keeps kAttentionDotLanes partial sums (element i in lane i mod 16, each an fma chain
// in increasing i from +0) combined by the canonical tree; the axpy is one fma per element.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include <cmath>

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
    float lane[kAttentionDotLanes] = {};
    for (int64_t i = 0; i < n; ++i) {
        float& p = lane[i % kAttentionDotLanes];
        p = std::fma(q[i], load(k_row, i, type), p);
    }
    for (int width = kAttentionDotLanes / 2; width >= 1; width /= 2) {
        for (int j = 0; j < width; ++j) lane[j] = lane[j] + lane[j + width];
    }
    return lane[0];
}

void attention_axpy(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type) {
    for (int64_t i = 0; i < n; ++i) out[i] = std::fma(w, load(v_row, i, type), out[i]);
}

}  // namespace reference

}  // namespace kvstash::kernels
