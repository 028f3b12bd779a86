// exp_f32 (backends/cpu/exp/exp_f32.h) on 16 lanes, written once over simd::F32x16: the scalar reference's
// operation sequence, step for step, so every vector ISA gives its bits. Include only from *_avx2.cpp /
// *_avx512.cpp / *_neon.cpp files (backends/cpu/simd/f32x16.h).
#pragma once

#include "backends/cpu/exp/exp_f32.h"
#include "backends/cpu/simd/f32x16.h"

namespace kvstash::simd {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including ISA file

inline F32x16 exp_f32(F32x16 x) {
    using namespace kernels::exp_f32_constants;
    const F32x16 xc = min(max(x, set1(kMinInput)), set1(kMaxInput));
    const F32x16 n = round_to_nearest_even(mul(xc, set1(kLog2e)));
    const F32x16 minus_n = negate(n);
    F32x16 r = fma(minus_n, set1(kLn2Hi), xc);
    r = fma(minus_n, set1(kLn2Lo), r);
    F32x16 p = set1(kC7);
    for (const float c : {kC6, kC5, kC4, kC3, kC2, kC1, kC0}) p = fma(p, r, set1(c));
    return nan_else(x, scale_by_pow2_halves(p, n));
}

// out[j] = exp_f32(in[j] - shift), j < n (in == out allowed): exp_f32_shifted_row.
inline void exp_f32_shifted_row(const float* in, float* out, int64_t n, float shift) {
    const F32x16 s = set1(shift);
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes) store(out + j, exp_f32(sub(load(in + j), s)));
    if (j < n) store_first(out + j, exp_f32(sub(load_first(in + j, n - j), s)), n - j);
}

}  // namespace
}  // namespace kvstash::simd
