// Scalar reference quantizers. The float operations are ggml's (ggml-quants.c quantize_row_q8_0_ref),
// in the same order, so the blocks are bitwise what ggml produces for finite inputs.

#include "format/quantize.h"

#include <cmath>
#include <cstring>
#include <string>

#include "format/tensor_type.h"
#include "kvstash/error.h"

namespace kvstash {

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
    constexpr int kQK = 32;
    if (n % kQK != 0) {
        throw Error(ErrorCode::invalid_argument,
                    "q8_0 quantization needs a multiple of 32 elements, got " + std::to_string(n));
    }
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / kQK; ++b, src += kQK, out += 34) {
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(src[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t d16 = fp32_to_fp16(d);
        std::memcpy(out, &d16, 2);
        for (int j = 0; j < kQK; ++j) {
            const float q = std::round(src[j] * id);
            // |q| <= 127 for finite inputs; the guard only keeps NaN/inf away from the int8 conversion.
            const int8_t qi = (q >= -127.0f && q <= 127.0f) ? static_cast<int8_t>(q) : int8_t{0};
            std::memcpy(out + 2 + j, &qi, 1);
        }
    }
}

}  // namespace kvstash
