// Device versions of the CPU's scalar number formats and e^x, written so that every float operation is the
// CPU reference's, in the same order, each rounded to nearest even (the __f*_rn / __d*_rn intrinsics: nvcc
// never contracts them into an fma, whatever --fmad says). So a GPU kernel built on these gives the CPU's
// bits where its reduction order is the CPU's too.
//   fp16_to_fp32 / fp32_to_fp16 / bf16_to_fp32: src/format/tensor_type.cpp (integer bit manipulation)
//   exp_f32: src/backends/cpu/exp/exp_f32.h (the sequence is spelled out there)
// The functions here and in dequant.cuh also compile as plain host C++ (g++ or nvcc's host pass), where the
// rounding helpers below are the ordinary operators (kvstash builds without fp contraction): tests/gpu's
// DevicePortsOnTheHost tests run them on the CPU, without a GPU, against the CPU originals.
// Not yet run on a GPU (docs/cuda.md): the claims above are by construction; tests/gpu checks them.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define KVSTASH_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVSTASH_HOST_DEVICE inline
#endif
// Unrolled loops on the device (register arrays indexed by constants); the host compiler ignores it.
#ifdef __CUDA_ARCH__
#define KVSTASH_UNROLL _Pragma("unroll")
#else
#define KVSTASH_UNROLL
#endif

namespace kvstash::cuda::device {

// One IEEE operation each, rounded to nearest even, never fused with another.
#ifdef __CUDA_ARCH__
KVSTASH_HOST_DEVICE float mul_rn(float a, float b) { return __fmul_rn(a, b); }
KVSTASH_HOST_DEVICE float add_rn(float a, float b) { return __fadd_rn(a, b); }
KVSTASH_HOST_DEVICE float sub_rn(float a, float b) { return __fsub_rn(a, b); }
KVSTASH_HOST_DEVICE float fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }
KVSTASH_HOST_DEVICE float div_rn(float a, float b) { return __fdiv_rn(a, b); }
KVSTASH_HOST_DEVICE float round_to_integer(float x) { return rintf(x); }  // nearest, ties to even
KVSTASH_HOST_DEVICE float round_half_away(float x) { return roundf(x); }
KVSTASH_HOST_DEVICE float abs_f(float x) { return fabsf(x); }
KVSTASH_HOST_DEVICE float max_f(float a, float b) { return fmaxf(a, b); }
KVSTASH_HOST_DEVICE int leading_zeros(uint32_t x) { return __clz(static_cast<int>(x)); }
KVSTASH_HOST_DEVICE float float_of_bits(uint32_t b) { return __uint_as_float(b); }
KVSTASH_HOST_DEVICE uint32_t bits_of_float(float f) { return __float_as_uint(f); }
#else
inline float mul_rn(float a, float b) { return a * b; }
inline float add_rn(float a, float b) { return a + b; }
inline float sub_rn(float a, float b) { return a - b; }
inline float fma_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float div_rn(float a, float b) { return a / b; }
inline float round_to_integer(float x) { return std::nearbyint(x); }  // the default rounding mode: nearest even
inline float round_half_away(float x) { return std::round(x); }
inline float abs_f(float x) { return std::fabs(x); }
inline float max_f(float a, float b) { return std::fmax(a, b); }
inline int leading_zeros(uint32_t x) { return std::countl_zero(x); }
inline float float_of_bits(uint32_t b) { return std::bit_cast<float>(b); }
inline uint32_t bits_of_float(float f) { return std::bit_cast<uint32_t>(f); }
#endif

KVSTASH_HOST_DEVICE float fp16_to_fp32(uint16_t h) {
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
        const int lead = 31 - leading_zeros(mantissa);  // 0..9: the highest set bit
        const uint32_t e = static_cast<uint32_t>(103 + lead);
        bits = sign | (e << 23) | ((mantissa << (23 - lead)) & 0x7FFFFFu);
    }
    return float_of_bits(bits);
}

KVSTASH_HOST_DEVICE uint16_t fp32_to_fp16(float f) {
    const uint32_t bits = bits_of_float(f);
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

KVSTASH_HOST_DEVICE float bf16_to_fp32(uint16_t h) { return float_of_bits(static_cast<uint32_t>(h) << 16); }

// 2^e for an integer e in the normal range [-126, 127].
KVSTASH_HOST_DEVICE float pow2(int32_t e) { return float_of_bits(static_cast<uint32_t>(e + 127) << 23); }

// kernels::exp_f32, operation for operation (constants from backends/cpu/exp/exp_f32.h).
KVSTASH_HOST_DEVICE float exp_f32(float x) {
    constexpr float kMinInput = -104.0f;
    constexpr float kMaxInput = 89.0f;
    constexpr float kLog2e = 0x1.715476p+0f;
    constexpr float kLn2Hi = 0x1.62e430p-1f;
    constexpr float kLn2Lo = -0x1.05c610p-29f;
    if (x != x) return x;  // NaN
    float xc = x > kMinInput ? x : kMinInput;
    xc = xc < kMaxInput ? xc : kMaxInput;
    const float n = round_to_integer(mul_rn(xc, kLog2e));
    float r = fma_rn(-n, kLn2Hi, xc);
    r = fma_rn(-n, kLn2Lo, r);
    float p = 1.9875691500e-4f;
    p = fma_rn(p, r, 1.3981999507e-3f);
    p = fma_rn(p, r, 8.3334519073e-3f);
    p = fma_rn(p, r, 4.1665795894e-2f);
    p = fma_rn(p, r, 1.6666665459e-1f);
    p = fma_rn(p, r, 5.0000001201e-1f);
    p = fma_rn(p, r, 1.0f);
    p = fma_rn(p, r, 1.0f);
    const auto ni = static_cast<int32_t>(n);
    const int32_t n1 = ni >> 1;
    const int32_t n2 = ni - n1;
    return mul_rn(mul_rn(p, pow2(n1)), pow2(n2));
}

}  // namespace kvstash::cuda::device
