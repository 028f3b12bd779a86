// RoPE's rotation, scalar reference (backends/cpu/rope/rope_rotate.h): every ISA gives its bits.
#pragma GCC optimize("fp-contract=off")  // products rounded before the add, as the SIMD paths do

#include "backends/cpu/rope/rope_rotate.h"

namespace kvstash::kernels::reference {

void rope_rotate(RopeLayout layout, float* v, int64_t half, int64_t begin, const float* cos_v, const float* sin_v) {
    for (int64_t i = begin; i < half; ++i) {
        const int64_t a = layout == RopeLayout::normal ? 2 * i : i;
        const int64_t b = layout == RopeLayout::normal ? 2 * i + 1 : i + half;
        const float x0 = v[a];
        const float x1 = v[b];
        v[a] = x0 * cos_v[i] - x1 * sin_v[i];
        v[b] = x0 * sin_v[i] + x1 * cos_v[i];
    }
}

}  // namespace kvstash::kernels::reference
