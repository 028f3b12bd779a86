// The integer-activation dot product of one weight row with one quantized activation row, exactly as
// defined in reference/matmul_int8_ref.cpp (see there). Included by that file (plain scalar build) and
// by matmul_int8_avx2.cpp (the same code compiled for AVX2 + FMA, which GCC vectorizes; the integer
// sums are exact and the float steps the same operations, so the results are the same bits). The
// including file must turn off floating-point contraction.
#pragma once

#include <cmath>
#include <cstring>

#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"

namespace kvstash::kernels {
namespace KVSTASH_INT8_DOT_NAMESPACE {
// File-local in each includer: one copy is built for AVX2 and one for the baseline, and they must not be
// merged into one shared (weak) symbol by the linker.
namespace {

inline float fp16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_fp32(h);
}

// The integer weights of a block in element order (q - 8, q, q - 32: as the definition's sums use them).
inline void block_ints(TensorType type, const uint8_t* w, int32_t* q) {
    if (type == kTensorTypeQ5_0) {  // fp16 d, qh (bit j: fifth bit of element j), 16 nibble bytes; q - 16
        uint32_t qh;
        std::memcpy(&qh, w + 2, 4);
        const uint8_t* qs = w + 6;
        for (int i = 0; i < 16; ++i) {
            q[i] = static_cast<int32_t>((qs[i] & 0x0F) | (((qh >> i) & 1u) << 4)) - 16;
            q[i + 16] = static_cast<int32_t>((qs[i] >> 4) | (((qh >> (i + 16)) & 1u) << 4)) - 16;
        }
        return;
    }
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q4_1: {
            const uint8_t* qs = w + (type == TensorType::Q4_1 ? 4 : 2);
            const int offset = type == TensorType::Q4_0 ? 8 : 0;
            for (int i = 0; i < 16; ++i) {
                q[i] = (qs[i] & 0x0F) - offset;
                q[i + 16] = (qs[i] >> 4) - offset;
            }
            return;
        }
        case TensorType::Q8_0:
            for (int i = 0; i < 32; ++i) q[i] = static_cast<int8_t>(w[2 + i]);
            return;
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            const bool five = type == TensorType::Q5_K;
            const uint8_t* qh = w + 16;
            const uint8_t* qs = w + (five ? 48 : 16);
            for (int j = 0; j < 8; ++j) {  // sub-block j: low (j even) or high nibbles of bytes 32 (j / 2) ..
                const int g = j / 2, shift = 4 * (j % 2);
                for (int l = 0; l < 32; ++l) {
                    int v = (qs[32 * g + l] >> shift) & 0x0F;
                    if (five) v |= ((qh[l] >> j) & 1) << 4;
                    q[32 * j + l] = v;
                }
            }
            return;
        }
        case TensorType::Q6_K:
            // Element e = 128 h + 32 k + l (l < 32): 4 low bits from ql[64 h + 32 (k % 2) + l] (the low
            // nibble for k < 2), 2 high bits from qh[32 h + l] (bits 2k, 2k+1).
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, k = (e % 128) / 32, l = e % 32;
                const uint8_t ql = w[64 * h + 32 * (k % 2) + l];
                const uint8_t qh = w[128 + 32 * h + l];
                q[e] = ((k < 2 ? ql & 0x0F : ql >> 4) | (((qh >> (2 * k)) & 3) << 4)) - 32;
            }
            return;
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: return;
    }
}

inline int32_t dot_range(const int32_t* q, const int8_t* x, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; ++i) s += q[i] * x[i];
    return s;
}

// One output: weight row w (cols elements), activation row t of xa.
inline float dot_int8(TensorType type, const uint8_t* w, const QuantizedActivations& xa, int64_t t) {
    const int8_t* xh = xa.h_row(t);
    const int8_t* xl = xa.l_row(t);
    const float* dx = xa.d_row(t);
    const int32_t* h32 = xa.h32_row(t);
    const int32_t* l32 = xa.l32_row(t);
    const int64_t cols = xa.cols;
    const uint32_t bytes = tensor_type_traits(type).type_size;
    int32_t q[256];
    float acc = 0.0f;
    if (tensor_type_traits(type).block_size == 32) {
        for (int64_t b = 0; b < cols / 32; ++b, w += bytes) {
            block_ints(type, w, q);
            const int32_t s = 256 * dot_range(q, xh + 32 * b, 32) + dot_range(q, xl + 32 * b, 32);
            const float c = fp16_at(w) * dx[b];
            acc = std::fma(c, static_cast<float>(s), acc);
            if (type == TensorType::Q4_1) {
                const float sx = dx[b] * static_cast<float>(256 * h32[b] + l32[b]);
                acc = std::fma(fp16_at(w + 2), sx, acc);
            }
        }
        return acc;
    }
    for (int64_t b = 0; b < cols / 256; ++b, w += bytes) {
        block_ints(type, w, q);
        const int8_t* bh = xh + 256 * b;
        const int8_t* bl = xl + 256 * b;
        int32_t s_h = 0, s_l = 0;
        float d = 0.0f;
        if (type == TensorType::Q6_K) {
            const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
            for (int j = 0; j < 16; ++j) {
                s_h += sc[j] * dot_range(q + 16 * j, bh + 16 * j, 16);
                s_l += sc[j] * dot_range(q + 16 * j, bl + 16 * j, 16);
            }
            d = fp16_at(w + 208);
        } else {
            int32_t m = 0;
            for (int j = 0; j < 8; ++j) {
                int sc = 0, mn = 0;
                k_quant_scale_min(j, w + 4, &sc, &mn);
                s_h += sc * dot_range(q + 32 * j, bh + 32 * j, 32);
                s_l += sc * dot_range(q + 32 * j, bl + 32 * j, 32);
                m += mn * (256 * h32[8 * b + j] + l32[8 * b + j]);
            }
            d = fp16_at(w);
            const float cm = fp16_at(w + 2) * dx[b];
            const int64_t s = 256 * static_cast<int64_t>(s_h) + s_l;
            acc = std::fma(d * dx[b], static_cast<float>(s), acc);
            acc = std::fma(-cm, static_cast<float>(m), acc);
            continue;
        }
        const int64_t s = 256 * static_cast<int64_t>(s_h) + s_l;
        acc = std::fma(d * dx[b], static_cast<float>(s), acc);
    }
    return acc;
}

}  // namespace
}  // namespace KVSTASH_INT8_DOT_NAMESPACE
}  // namespace kvstash::kernels
