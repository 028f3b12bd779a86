// Device versions of the CPU's scalar number formats and e^x, written so that every float operation is the
// CPU reference's, in the same order, each rounded to nearest even (the __f*_rn / __d*_rn intrinsics: nvcc
// never contracts them into an fma, whatever --fmad says). So a GPU kernel built on these gives the CPU's
// bits where its reduction order is the CPU's too.
//   fp16_to_fp32 / fp32_to_fp16 / bf16_to_fp32: src/format/tensor_type.cpp (integer bit manipulation)
//   exp_f32: src/kernels/exp_f32.h (the sequence is spelled out there)
// Not yet run on a GPU (docs/cuda.md): the claims above are by construction; tests/gpu checks them.
#pragma once

#include <cstdint>

namespace kvstash::cuda::device {

__device__ __forceinline__ float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1Fu;
    uint32_t mantissa = h & 0x3FFu;
    uint32_t bits;
    if (exponent == 0x1F) {
        bits = sign | 0x7F800000u | (mantissa << 13);
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else {
        // Subnormal half (mantissa * 2^-24): the same value as normalising it, exact in f32.
        const int lead = 31 - __clz(mantissa);  // 0..9: the highest set bit
        const uint32_t e = static_cast<uint32_t>(103 + lead);
        bits = sign | (e << 23) | ((mantissa << (23 - lead)) & 0x7FFFFFu);
    }
    return __uint_as_float(bits);
}

__device__ __forceinline__ uint16_t fp32_to_fp16(float f) {
    const uint32_t bits = __float_as_uint(f);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
    const uint32_t abs = bits & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
    if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
    if (abs >= 0x38800000u) {
        const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
        return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
    }
    if (abs < 0x33000000u) return sign;
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;
    const uint32_t half_ulp = 1u << (shift - 1);
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    if (rest > half_ulp || (rest == half_ulp && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
}

__device__ __forceinline__ float bf16_to_fp32(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

// 2^e for an integer e in the normal range [-126, 127].
__device__ __forceinline__ float pow2(int32_t e) { return __uint_as_float(static_cast<uint32_t>(e + 127) << 23); }

// kernels::exp_f32, operation for operation (constants from kernels/exp_f32.h).
__device__ __forceinline__ float exp_f32(float x) {
    constexpr float kMinInput = -104.0f;
    constexpr float kMaxInput = 89.0f;
    constexpr float kLog2e = 0x1.715476p+0f;
    constexpr float kLn2Hi = 0x1.62e430p-1f;
    constexpr float kLn2Lo = -0x1.05c610p-29f;
    if (x != x) return x;  // NaN
    float xc = x > kMinInput ? x : kMinInput;
    xc = xc < kMaxInput ? xc : kMaxInput;
    const float n = rintf(__fmul_rn(xc, kLog2e));  // rintf: nearest, ties to even (std::nearbyint's default)
    float r = __fmaf_rn(-n, kLn2Hi, xc);
    r = __fmaf_rn(-n, kLn2Lo, r);
    float p = 1.9875691500e-4f;
    p = __fmaf_rn(p, r, 1.3981999507e-3f);
    p = __fmaf_rn(p, r, 8.3334519073e-3f);
    p = __fmaf_rn(p, r, 4.1665795894e-2f);
    p = __fmaf_rn(p, r, 1.6666665459e-1f);
    p = __fmaf_rn(p, r, 5.0000001201e-1f);
    p = __fmaf_rn(p, r, 1.0f);
    p = __fmaf_rn(p, r, 1.0f);
    const auto ni = static_cast<int32_t>(n);
    const int32_t n1 = ni >> 1;
    const int32_t n2 = ni - n1;
    return __fmul_rn(__fmul_rn(p, pow2(n1)), pow2(n2));
}

}  // namespace kvstash::cuda::device
