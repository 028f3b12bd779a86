// RoPE's rotation (rope_rotate.h) written once over simd::F32x16: 8 pairs (normal layout: lanes 2k, 2k+1 hold
// pair k) or 16 pairs (neox: x0 and x1 in two vectors) per step, the products rounded before the add or
// subtract as in the reference, which rotates the remaining pairs. Include only from *_avx2.cpp / *_avx512.cpp /
// *_neon.cpp files (backends/cpu/simd/f32x16.h).
#pragma once

#include "backends/cpu/rope/rope_rotate.h"
#include "backends/cpu/simd/f32x16.h"

namespace kvstash::simd {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including ISA file

inline void rope_rotate(RopeLayout layout, float* v, int64_t half, int64_t begin, const float* cos_v,
                        const float* sin_v) {
    int64_t i = begin;
    if (layout == RopeLayout::normal) {
        // t1 = x·cos, t2 = (pair-swapped x)·sin; even lanes t1 - t2 (x0·c - x1·s), odd lanes t1 + t2 (x1·c + x0·s).
        for (; i + kLanes / 2 <= half; i += kLanes / 2) {
            const F32x16 x = load(v + 2 * i);
            const F32x16 t1 = mul(x, load_pairs_duplicated(cos_v + i));
            const F32x16 t2 = mul(swap_pairs(x), load_pairs_duplicated(sin_v + i));
            store(v + 2 * i, sub_even_add_odd(t1, t2));
        }
    } else {
        for (; i + kLanes <= half; i += kLanes) {
            const F32x16 x0 = load(v + i);
            const F32x16 x1 = load(v + half + i);
            const F32x16 c = load(cos_v + i);
            const F32x16 s = load(sin_v + i);
            store(v + i, sub(mul(x0, c), mul(x1, s)));
            store(v + half + i, add(mul(x0, s), mul(x1, c)));
        }
    }
    kernels::reference::rope_rotate(layout, v, half, i, cos_v, sin_v);
}

}  // namespace
}  // namespace kvstash::simd
