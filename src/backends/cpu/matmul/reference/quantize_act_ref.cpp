// The scalar activation quantizer (backends/cpu/matmul/quantize_act.h): the definition of the 16-bit two-plane
// activations; the SIMD version (quantize_act_avx512.cpp, quantize_act_avx2.cpp) gives its bits.
#pragma GCC optimize("fp-contract=off")  // the scale and products exactly as written

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/matmul/quantize_act.h"

namespace kvstash::kernels::reference {

void quantize_activation_row(const float* x, int64_t cols, int64_t block, int8_t* h, int8_t* l, float* d, int32_t* h32,
                             int32_t* l32, int32_t* h16, int32_t* l16) {
    constexpr auto kMax = static_cast<float>(kActivationMax);
    for (int64_t b0 = 0; b0 < cols; b0 += block) {
        float amax = 0.0f;
        for (int64_t i = b0; i < b0 + block; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float scale = amax / kMax;
        const float inv = amax > 0.0f ? kMax / amax : 0.0f;
        d[b0 / block] = scale;
        for (int64_t i = b0; i < b0 + block; ++i) {
            // Round half to even without libm: adding 1.5 · 2^23 leaves the integer in the low mantissa
            // bits (|v| <= 32639 + rounding, far below 2^22). Clamped against inf/NaN inputs.
            const float v = x[i] * inv;
            const float shifted = v + 12582912.0f;
            int32_t bits;
            std::memcpy(&bits, &shifted, 4);
            const int32_t q = std::clamp(bits - 0x4B400000, -kActivationMax, kActivationMax);
            const int32_t low = ((q + 128) & 0xFF) - 128;
            l[i] = static_cast<int8_t>(low);
            h[i] = static_cast<int8_t>((q - low) / 256);
        }
    }
    for (int64_t i = 0; i < cols; i += 16) {
        int32_t sh = 0, sl = 0;
        for (int64_t k = i; k < i + 16; ++k) {
            sh += h[k];
            sl += l[k];
        }
        h16[i / 16] = sh;
        l16[i / 16] = sl;
    }
    for (int64_t i = 0; i < cols / 32; ++i) {
        h32[i] = h16[2 * i] + h16[2 * i + 1];
        l32[i] = l16[2 * i] + l16[2 * i + 1];
    }
}

}  // namespace kvstash::kernels::reference
