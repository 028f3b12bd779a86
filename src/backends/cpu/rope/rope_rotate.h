// The rotation step of RoPE (backends/cpu/rope/rope.h) for one head, per instruction set. Pair i (angle i) is
// (v[2i], v[2i+1]) in the normal layout and (v[i], v[i + half]) in the neox layout; each pair becomes
//   (x0·cos_i - x1·sin_i,  x0·sin_i + x1·cos_i)
// with the two products rounded before the add or subtract (never fused), so every ISA gives the
// scalar reference's bits (tests/unit/norm_rope_test.cpp).
#pragma once

#include <cstdint>

#include "backends/cpu/rope/rope_params.h"
#include "backends/cpu/runtime/dispatch.h"

namespace kvstash::kernels {

// Each rotates pairs [begin, half) of the head at v (half = n_rot / 2): RopeRotateFn (backends/cpu/runtime/dispatch.h).
namespace reference {
void rope_rotate(RopeLayout layout, float* v, int64_t half, int64_t begin, const float* cos_v, const float* sin_v);
}  // namespace reference
void rope_rotate_avx2(RopeLayout layout, float* v, int64_t half, int64_t begin, const float* cos_v, const float* sin_v);
void rope_rotate_avx512(RopeLayout layout, float* v, int64_t half, int64_t begin, const float* cos_v,
                        const float* sin_v);
void rope_rotate_neon(RopeLayout layout, float* v, int64_t half, int64_t begin, const float* cos_v, const float* sin_v);

}  // namespace kvstash::kernels
