// e^x in fp32 with one fixed sequence of float operations, so that the scalar reference and the AVX2
// (8 lanes) and AVX-512 (16 lanes) versions give the same bits for every input. (std::exp is libm's:
// its bits may change with the library version, and it cannot be vectorised bitwise.)
//
// The sequence, every step rounded to fp32 (round to nearest even), fma = one rounding:
//   xc = min(max(x, -104), 89)             (below -104, e^x < 2^-150 rounds to 0; above 89 it is +inf)
//   n  = nearbyint(xc * log2e)             (|n| <= 150)
//   r  = fma(-n, ln2_hi, xc)               (exact: ln2_hi has 24 bits, |r| < 0.5)
//   r  = fma(-n, ln2_lo, r)                (|r| <= ~0.35)
//   p  = c7; p = fma(p, r, c_k) for k = 6..0   (Horner, c1 = c0 = 1, so exp(0) == 1 exactly)
//   n1 = n >> 1 (floor), n2 = n - n1       (each in [-75, 65]: 2^n1, 2^n2 are normal floats)
//   y  = (p * 2^n1) * 2^n2                 (the first product is exact, the second rounds once, so
//                                           subnormal results are correctly rounded from p·2^n and
//                                           overflow gives +inf)
//   NaN in: that same NaN out.  -inf -> +0, +inf -> +inf.
// c2..c7: the Cephes expf polynomial (S. L. Moshier, Cephes Math Library, expf.c), a minimax fit of
// (e^r - 1 - r) / r² on |r| <= ln2/2.
// Accuracy: |exp_f32(x) - e^x| / ulp(e^x) (e^x in double; ulp of fp32, 2^-149 for subnormals) is at most
// 0.894 ulp, measured once over all 2^32 inputs (AVX-512 path, which equalled AVX2 on every input;
// worst at x = 26.6887). tests/unit/exp_f32_test.cpp checks <= 1 ulp on a sample of the whole range.
#pragma once

#include <cstdint>

#include "backends/cpu/runtime/dispatch.h"

namespace kvstash::kernels {

namespace exp_f32_constants {
inline constexpr float kMinInput = -104.0f;
inline constexpr float kMaxInput = 89.0f;
inline constexpr float kLog2e = 0x1.715476p+0f;
inline constexpr float kLn2Hi = 0x1.62e430p-1f;    // ln 2 rounded to fp32
inline constexpr float kLn2Lo = -0x1.05c610p-29f;  // ln 2 - kLn2Hi
inline constexpr float kC7 = 1.9875691500e-4f;
inline constexpr float kC6 = 1.3981999507e-3f;
inline constexpr float kC5 = 8.3334519073e-3f;
inline constexpr float kC4 = 4.1665795894e-2f;
inline constexpr float kC3 = 1.6666665459e-1f;
inline constexpr float kC2 = 5.0000001201e-1f;
inline constexpr float kC1 = 1.0f;
inline constexpr float kC0 = 1.0f;
}  // namespace exp_f32_constants

// The scalar reference.
float exp_f32(float x);

// out[j] = exp_f32(in[j] - shift) for j < n, on `isa` (one of available_isas(), not checked; in == out
// allowed): the softmax numerators.
// Every ISA gives the scalar reference's bits.
void exp_f32_shifted_row(Isa isa, const float* in, float* out, int64_t n, float shift);

namespace reference {
void exp_f32_shifted_row(const float* in, float* out, int64_t n, float shift);
}  // namespace reference
void exp_f32_shifted_row_avx2(const float* in, float* out, int64_t n, float shift);
void exp_f32_shifted_row_avx512(const float* in, float* out, int64_t n, float shift);
void exp_f32_shifted_row_neon(const float* in, float* out, int64_t n, float shift);  // aarch64 (exp_f32_neon.cpp)

}  // namespace kvstash::kernels
