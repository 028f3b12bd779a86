// SwiGLU (activation.h) and GELU (gelu.h) written once over simd::F32x16: the references' operation
// sequences on 16 lanes, the tail masked, so every vector ISA gives their bits. Include only from
// *_avx2.cpp / *_avx512.cpp / *_neon.cpp files (backends/cpu/simd/f32x16.h).
#pragma once

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/activation/gelu.h"
#include "backends/cpu/exp/exp_f32x16.h"

namespace kvstash::simd {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including ISA file

// silu(g) · up = (g / (1 + exp_f32(-g))) · up
inline F32x16 swiglu16(F32x16 g, F32x16 up) { return mul(div(g, add(set1(1.0f), exp_f32(negate(g)))), up); }

// x / (1 + exp_f32(-(x · (kA + kB · x²))))
inline F32x16 gelu16(F32x16 x) {
    const F32x16 p = add(set1(kernels::kGeluA), mul(set1(kernels::kGeluB), mul(x, x)));
    return div(x, add(set1(1.0f), exp_f32(negate(mul(x, p)))));
}

inline void swiglu(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) store(out + i, swiglu16(load(gate + i), load(up + i)));
    if (i < n) store_first(out + i, swiglu16(load_first(gate + i, n - i), load_first(up + i, n - i)), n - i);
}

inline void gelu(const float* x, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) store(out + i, gelu16(load(x + i)));
    if (i < n) store_first(out + i, gelu16(load_first(x + i, n - i)), n - i);
}

}  // namespace
}  // namespace kvstash::simd
