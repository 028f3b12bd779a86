// The activation quantizer on aarch64 NEON (backends/cpu/matmul/quantize_act.h), used with the NEON integer kernels
// (matmul_int8_neon.h).
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (no fma)

#include <arm_neon.h>

#include "backends/cpu/matmul/quantize_act.h"

namespace kvstash::kernels {

// Bitwise the scalar quantize_activation_row: max of |x| as std::max takes it (a > m ? a : m, so NaN lanes keep m;
// exact in any order), the same scale and reciprocal computed in scalar, then per 16 elements the same product,
// rounding add and integer steps.
void quantize_activation_row_neon(const float* x, int64_t cols, int64_t block, int8_t* h, int8_t* l, float* d,
                                  int32_t* h32, int32_t* l32, int32_t* h16, int32_t* l16) {
    constexpr auto kMax = static_cast<float>(kActivationMax);
    const float32x4_t magic = vdupq_n_f32(12582912.0f);
    const int32x4_t bias = vdupq_n_s32(0x4B400000), lo = vdupq_n_s32(-kActivationMax), hi = vdupq_n_s32(kActivationMax),
                    half = vdupq_n_s32(128), byte = vdupq_n_s32(0xFF);
    for (int64_t b0 = 0; b0 < cols; b0 += block) {
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int64_t i = b0; i < b0 + block; i += 4) {
            const float32x4_t a = vabsq_f32(vld1q_f32(x + i));
            m = vbslq_f32(vcgtq_f32(a, m), a, m);  // NaN lanes keep m
        }
        const float amax = vmaxvq_f32(m);  // no NaN among the lanes
        const float scale = amax / kMax;
        const float inv = amax > 0.0f ? kMax / amax : 0.0f;
        d[b0 / block] = scale;
        const float32x4_t vinv = vdupq_n_f32(inv);
        for (int64_t i = b0; i < b0 + block; i += 16) {
            int32x4_t low[4], high[4];
            for (int j = 0; j < 4; ++j) {
                const float32x4_t shifted = vaddq_f32(vmulq_f32(vld1q_f32(x + i + 4 * j), vinv), magic);
                const int32x4_t q = vmaxq_s32(lo, vminq_s32(hi, vsubq_s32(vreinterpretq_s32_f32(shifted), bias)));
                low[j] = vsubq_s32(vandq_s32(vaddq_s32(q, half), byte), half);
                high[j] = vshrq_n_s32(vsubq_s32(q, low[j]), 8);  // exact: q - low is a multiple of 256
            }
            const int16x8_t low01 = vcombine_s16(vmovn_s32(low[0]), vmovn_s32(low[1]));
            const int16x8_t low23 = vcombine_s16(vmovn_s32(low[2]), vmovn_s32(low[3]));
            const int16x8_t high01 = vcombine_s16(vmovn_s32(high[0]), vmovn_s32(high[1]));
            const int16x8_t high23 = vcombine_s16(vmovn_s32(high[2]), vmovn_s32(high[3]));
            vst1q_s8(l + i, vcombine_s8(vmovn_s16(low01), vmovn_s16(low23)));
            vst1q_s8(h + i, vcombine_s8(vmovn_s16(high01), vmovn_s16(high23)));
            h16[i / 16] = vaddvq_s32(vaddq_s32(vaddq_s32(high[0], high[1]), vaddq_s32(high[2], high[3])));
            l16[i / 16] = vaddvq_s32(vaddq_s32(vaddq_s32(low[0], low[1]), vaddq_s32(low[2], low[3])));
        }
    }
    for (int64_t i = 0; i < cols / 32; ++i) {
        h32[i] = h16[2 * i] + h16[2 * i + 1];
        l32[i] = l16[2 * i] + l16[2 * i + 1];
    }
}

}  // namespace kvstash::kernels
