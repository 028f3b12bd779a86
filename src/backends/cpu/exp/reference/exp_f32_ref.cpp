// The scalar exp_f32 (backends/cpu/exp/exp_f32.h), the reference every ISA's version equals bitwise.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include "backends/cpu/exp/exp_f32.h"

#include <bit>
#include <cmath>

namespace kvstash::kernels {

namespace {
// 2^e for an integer e in the normal range [-126, 127].
inline float pow2(int32_t e) { return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23); }
}  // namespace

float exp_f32(float x) {
    using namespace exp_f32_constants;
    if (std::isnan(x)) return x;
    // Written as the vector max/min do it for non-NaN inputs.
    float xc = x > kMinInput ? x : kMinInput;
    xc = xc < kMaxInput ? xc : kMaxInput;
    const float n = std::nearbyint(xc * kLog2e);
    float r = std::fma(-n, kLn2Hi, xc);
    r = std::fma(-n, kLn2Lo, r);
    float p = kC7;
    p = std::fma(p, r, kC6);
    p = std::fma(p, r, kC5);
    p = std::fma(p, r, kC4);
    p = std::fma(p, r, kC3);
    p = std::fma(p, r, kC2);
    p = std::fma(p, r, kC1);
    p = std::fma(p, r, kC0);
    const auto ni = static_cast<int32_t>(n);
    const int32_t n1 = ni >> 1;
    const int32_t n2 = ni - n1;
    return (p * pow2(n1)) * pow2(n2);
}

namespace reference {
void exp_f32_shifted_row(const float* in, float* out, int64_t n, float shift) {
    for (int64_t j = 0; j < n; ++j) out[j] = exp_f32(in[j] - shift);
}
}  // namespace reference

}  // namespace kvstash::kernels
