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

namespace kvstash {
namespace {

// ggml's nearest_int: round half to even through the float's mantissa (valid for |v| < 2^22).
int nearest_int(float v) {
    const float shifted = v + 12582912.0f;  // 1.5 × 2^23
    int32_t bits = 0;
    std::memcpy(&bits, &shifted, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

uint8_t clamp_level(int l, int nmax) { return static_cast<uint8_t>(l < 0 ? 0 : (l > nmax ? nmax : l)); }

// One 32-value sub-block: levels L[i] in [0, nmax] and (scale, -min) minimizing the weighted squared error of
// scale × L + min against x, searched over iscale = (rmin + rdelta × is + nmax) / (max − min), is = 0..nstep.
// Returns the scale; *neg_min = −min (≥ 0). laux is scratch.
float fit_scale_and_min(int n, int nmax, const float* x, const float* w, uint8_t* levels, float* neg_min, uint8_t* laux,
                        float rmin, float rdelta, int nstep) {
    float min = x[0];
    float max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) levels[i] = 0;
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = static_cast<float>(nmax) / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        levels[i] = clamp_level(nearest_int(iscale * (x[i] - min)), nmax);
        float diff = scale * static_cast<float>(levels[i]) + min - x[i];
        diff = diff * diff;
        best_error += w[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const uint8_t l = clamp_level(nearest_int(iscale * (x[i] - min)), nmax);
            laux[i] = l;
            const float lf = static_cast<float>(l);
            sum_l += w[i] * lf;
            sum_l2 += w[i] * lf * lf;
            sum_xl += w[i] * lf * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * static_cast<float>(laux[i]) + this_min - x[i];
                diff = diff * diff;
                cur_error += w[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) levels[i] = laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

}  // namespace

void quantize_row_q4_K(const float* src, void* dst, int64_t n) {
    constexpr int kQK = 256;
    constexpr int kSub = 32;
    constexpr int kBlockBytes = 144;
    if (n % kQK != 0) {
        throw Error(ErrorCode::invalid_argument,
                    "q4_K quantization needs a multiple of 256 elements, got " + std::to_string(n));
    }
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / kQK; ++b, src += kQK, out += kBlockBytes) {
        uint8_t levels[kQK];
        uint8_t laux[kSub];
        float weights[kSub];
        float mins[kQK / kSub];
        float scales[kQK / kSub];
        float max_scale = 0;  // the min is subtracted, so scales are never negative
        float max_min = 0;
        for (int j = 0; j < kQK / kSub; ++j) {
            const float* x = src + kSub * j;
            float sum_x2 = 0;
            for (int l = 0; l < kSub; ++l) sum_x2 += x[l] * x[l];
            const float av_x = std::sqrt(sum_x2 / kSub);
            for (int l = 0; l < kSub; ++l) weights[l] = av_x + std::fabs(x[l]);
            scales[j] = fit_scale_and_min(kSub, 15, x, weights, levels + kSub * j, &mins[j], laux, -1.0f, 0.1f, 20);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        uint8_t* packed = out + 4;  // 12 bytes: 6-bit scales and mins of the 8 sub-blocks
        const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        for (int j = 0; j < kQK / kSub; ++j) {
            uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
            uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
            ls = ls < 63 ? ls : 63;
            lm = lm < 63 ? lm : 63;
            if (j < 4) {
                packed[j] = ls;
                packed[j + 4] = lm;
            } else {
                packed[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
                packed[j - 4] = static_cast<uint8_t>(packed[j - 4] | ((ls >> 4) << 6));
                packed[j] = static_cast<uint8_t>(packed[j] | ((lm >> 4) << 6));
            }
        }
        const uint16_t d16 = fp32_to_fp16(max_scale / 63.0f);
        const uint16_t dmin16 = fp32_to_fp16(max_min / 63.0f);
        std::memcpy(out, &d16, 2);
        std::memcpy(out + 2, &dmin16, 2);
        for (int j = 0; j < kQK / kSub; ++j) {
            uint8_t sc = 0;
            uint8_t m = 0;
            if (j < 4) {
                sc = packed[j] & 63;
                m = packed[j + 4] & 63;
            } else {
                sc = static_cast<uint8_t>((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4));
                m = static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
            }
            const float d = fp16_to_fp32(d16) * static_cast<float>(sc);
            if (d == 0.0f) continue;  // the sub-block keeps the levels of its fit, as ggml
            const float dm = fp16_to_fp32(dmin16) * static_cast<float>(m);
            for (int i = 0; i < kSub; ++i) {
                levels[kSub * j + i] = clamp_level(nearest_int((src[kSub * j + i] + dm) / d), 15);
            }
        }
        uint8_t* q = out + 16;
        for (int j = 0; j < kQK; j += 64, q += 32) {
            for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(levels[j + l] | (levels[j + l + 32] << 4));
        }
    }
}

}  // namespace kvstash
