// RMSNorm: out[i] = weight[i] * (x[i] * scale), scale = 1 / sqrt(mean(x²) + eps), one row of n values.
//
// The sum of squares is in double (a square of a float is exact in double; only the additions round),
// over 16 partial sums with a fixed combination, the same on every ISA (AVX-512: two 8-lane registers,
// AVX2: four 4-lane ones), so it depends on the row alone and every path gives the same bits:
//   acc[k] = sum over i ≡ k (mod 16), in increasing i, of double(x[i])²      (k = 0..15, from +0)
//   s8[k] = acc[k] + acc[k+8];  s4[k] = s8[k] + s8[k+4];  s2[k] = s4[k] + s4[k+2];  sum = s2[0] + s2[1]
//   mean = float(sum / n);  scale = 1.0f / sqrtf(mean + eps);  out[i] = weight[i] * (x[i] * scale)
#pragma once

#include <cstdint>

#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {

// On the process's instruction set (backends/cpu/runtime/dispatch.h); _with: on `isa`, which must be one of
// available_isas() (not checked here, unlike matmul_with: these run per row).
void rms_norm_row(const float* x, const float* weight, float* out, int64_t n, float eps);
void rms_norm_row_with(Isa isa, const float* x, const float* weight, float* out, int64_t n, float eps);

namespace kernels {
inline constexpr int kRmsNormLanes = 16;  // partial sums of the sum of squares
// The sum of squares on `isa` (the same bits on every ISA). Tests compare it directly: the float mean
// rounds most differences of the double sum away.
double sum_of_squares(Isa isa, const float* x, int64_t n);
namespace reference {
double sum_of_squares(const float* x, int64_t n);
void scale_row(const float* x, const float* weight, float scale, float* out, int64_t n);
}  // namespace reference
double sum_of_squares_avx2(const float* x, int64_t n);
void scale_row_avx2(const float* x, const float* weight, float scale, float* out, int64_t n);
double sum_of_squares_avx512(const float* x, int64_t n);
void scale_row_avx512(const float* x, const float* weight, float scale, float* out, int64_t n);
double sum_of_squares_neon(const float* x, int64_t n);  // aarch64 (norm_neon.cpp)
void scale_row_neon(const float* x, const float* weight, float scale, float* out, int64_t n);
}  // namespace kernels

}  // namespace kvstash
