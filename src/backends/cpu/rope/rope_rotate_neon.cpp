// RoPE's rotation on aarch64: the one 16-lane definition (rope_rotate_f32x16.h), the vector as four NEON registers.
#include "backends/cpu/rope/rope_rotate_f32x16.h"

namespace kvstash::kernels {

void rope_rotate_neon(RopeLayout layout, float* v, int64_t half, int64_t begin, const float* cos_v,
                      const float* sin_v) {
    simd::rope_rotate(layout, v, half, begin, cos_v, sin_v);
}

}  // namespace kvstash::kernels
