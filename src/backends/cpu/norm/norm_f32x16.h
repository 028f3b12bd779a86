// RMSNorm's vector kernels (norm.h) written once over simd::F32x16 / F64x16: the sum of squares in 16
// double lanes and the canonical tree, and the scaling out = weight · (x · scale), the reference's bits on every
// vector ISA. Include only from *_avx2.cpp / *_avx512.cpp / *_neon.cpp files (backends/cpu/simd/f32x16.h).
#pragma once

#include "backends/cpu/norm/norm.h"
#include "backends/cpu/simd/f32x16.h"

namespace kvstash::simd {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including ISA file

static_assert(kernels::kRmsNormLanes == kLanes, "RMSNorm's partial sums are the vector's lanes");

// Zeros past the end add +0 squares: the partial sums keep their bits.
inline double sum_of_squares(const float* x, int64_t n) {
    F64x16 acc = zero_f64();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) acc = add_squares(acc, load(x + i));
    if (i < n) acc = add_squares(acc, load_first(x + i, n - i));
    return reduce_add(acc);
}

inline void scale_row(const float* x, const float* weight, float scale, float* out, int64_t n) {
    const F32x16 s = set1(scale);
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) store(out + i, mul(load(weight + i), mul(load(x + i), s)));
    if (i < n) store_first(out + i, mul(load_first(weight + i, n - i), mul(load_first(x + i, n - i), s)), n - i);
}

}  // namespace
}  // namespace kvstash::simd
