// Decoding one 32-element chunk of a weight row on the device, for every GGUF block layout the CUDA kernels
// take (BF16, F16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K). A row of `cols` elements is cols / 32 chunks; chunk c holds
// elements 32c .. 32c + 31. For Q8_0 / Q4_0 / Q4_1 a chunk is one block; for the K-quants a chunk is one
// 32-element sub-block of a 256-element super-block (8 chunks per super-block).
//
// Every value is the CPU reference dequantizer's (src/format/tensor_type.cpp, which follows ggml), bit for
// bit: the same float operations in the same order, each rounded on its own (mul_rn, sub_rn, ...:
// never fused into an fma). tests/gpu/dequant_test.cpp compares every type bitwise with dequantize_row.
#pragma once

#include <cstdint>

#include "backends/cuda/device_numerics.cuh"
#include "format/tensor_type.h"

namespace kvstash::cuda::device {

inline constexpr int kChunk = 32;

KVSTASH_HOST_DEVICE uint16_t load_u16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}
KVSTASH_HOST_DEVICE float load_fp16(const uint8_t* p) { return fp16_to_fp32(load_u16(p)); }

// ggml get_scale_min_k4: sub-block j's 6-bit scale and min from the 12 scale bytes of q4_K.
KVSTASH_HOST_DEVICE void k_quant_scale_min(int j, const uint8_t* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// out[0..31] = elements 32c .. 32c + 31 of the row at `row` (raw bytes of a row of `Type`).
template <TensorType Type>
KVSTASH_HOST_DEVICE void dequantize_chunk(const uint8_t* row, int64_t c, float (&out)[kChunk]) {
    if constexpr (Type == TensorType::F16 || Type == TensorType::BF16) {
        const uint8_t* p = row + c * 64;
        KVSTASH_UNROLL
        for (int j = 0; j < kChunk; ++j) {
            const uint16_t h = load_u16(p + 2 * j);
            out[j] = Type == TensorType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
        }
    } else if constexpr (Type == TensorType::Q8_0) {  // x = q * d
        const uint8_t* b = row + c * 34;
        const float d = load_fp16(b);
        KVSTASH_UNROLL
        for (int j = 0; j < kChunk; ++j) out[j] = mul_rn(static_cast<float>(static_cast<int8_t>(b[2 + j])), d);
    } else if constexpr (Type == TensorType::Q4_0) {  // x = (q - 8) * d; j low nibble, j + 16 high nibble
        const uint8_t* b = row + c * 18;
        const float d = load_fp16(b);
        KVSTASH_UNROLL
        for (int j = 0; j < kChunk / 2; ++j) {
            out[j] = mul_rn(static_cast<float>((b[2 + j] & 0x0F) - 8), d);
            out[j + 16] = mul_rn(static_cast<float>((b[2 + j] >> 4) - 8), d);
        }
    } else if constexpr (Type == TensorType::Q4_1) {  // x = q * d + m
        const uint8_t* b = row + c * 20;
        const float d = load_fp16(b);
        const float m = load_fp16(b + 2);
        KVSTASH_UNROLL
        for (int j = 0; j < kChunk / 2; ++j) {
            out[j] = add_rn(mul_rn(static_cast<float>(b[4 + j] & 0x0F), d), m);
            out[j + 16] = add_rn(mul_rn(static_cast<float>(b[4 + j] >> 4), d), m);
        }
    } else if constexpr (Type == TensorType::Q4_K) {
        // Super-block: fp16 d, fp16 dmin, 12 scale bytes, 128 nibble bytes; byte 32p + l holds sub-block 2p
        // (low nibble) and 2p + 1 (high nibble). x = (d * sc) * q - (dmin * m).
        const uint8_t* b = row + (c / 8) * 144;
        const int sub = static_cast<int>(c % 8);
        const float d = load_fp16(b);
        const float dmin = load_fp16(b + 2);
        int sc = 0, m = 0;
        k_quant_scale_min(sub, b + 4, &sc, &m);
        const float d1 = mul_rn(d, static_cast<float>(sc));
        const float m1 = mul_rn(dmin, static_cast<float>(m));
        const uint8_t* q = b + 16 + (sub / 2) * 32;
        const int shift = (sub % 2) * 4;
        KVSTASH_UNROLL
        for (int l = 0; l < kChunk; ++l) out[l] = sub_rn(mul_rn(d1, static_cast<float>((q[l] >> shift) & 0x0F)), m1);
    } else if constexpr (Type == TensorType::Q5_K) {
        // As Q4_K, plus a fifth bit per element: bit `sub` of qh[l] (32 bytes after the scales); the nibbles
        // follow qh. x = (d * sc) * (nibble + 16 * bit) - (dmin * m).
        const uint8_t* b = row + (c / 8) * 176;
        const int sub = static_cast<int>(c % 8);
        const float d = load_fp16(b);
        const float dmin = load_fp16(b + 2);
        int sc = 0, m = 0;
        k_quant_scale_min(sub, b + 4, &sc, &m);
        const float d1 = mul_rn(d, static_cast<float>(sc));
        const float m1 = mul_rn(dmin, static_cast<float>(m));
        const uint8_t* qh = b + 16;
        const uint8_t* q = b + 48 + (sub / 2) * 32;
        const int shift = (sub % 2) * 4;
        KVSTASH_UNROLL
        for (int l = 0; l < kChunk; ++l) {
            const int v = ((q[l] >> shift) & 0x0F) + (((qh[l] >> sub) & 1) ? 16 : 0);
            out[l] = sub_rn(mul_rn(d1, static_cast<float>(v)), m1);
        }
    } else if constexpr (Type == TensorType::Q6_K) {
        // Super-block: 128 B low nibbles, 64 B high 2-bit pairs, 16 int8 scales, fp16 d. Element 128h + 32k + l
        // (half h, quarter k, l < 32): low 4 bits from ql[64h + l + 32(k & 1)] (high nibble when k >= 2), high
        // 2 bits from qh[32h + l] >> 2k; x = (d * scale[8h + l/16 + 2k]) * (q - 32).
        const uint8_t* b = row + (c / 8) * 210;
        const int sub = static_cast<int>(c % 8);
        const int half = sub / 4;
        const int k = sub % 4;
        const uint8_t* ql = b + half * 64 + (k & 1) * 32;
        const uint8_t* qh = b + 128 + half * 32;
        const auto* scales = reinterpret_cast<const int8_t*>(b + 192 + half * 8);
        const float d = load_fp16(b + 208);
        const int low_shift = (k >> 1) * 4;
        const float d0 = mul_rn(d, static_cast<float>(scales[0 + 2 * k]));
        const float d1 = mul_rn(d, static_cast<float>(scales[1 + 2 * k]));
        KVSTASH_UNROLL
        for (int l = 0; l < kChunk; ++l) {
            const int q = static_cast<int>(((ql[l] >> low_shift) & 0x0F) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
            out[l] = mul_rn(l < 16 ? d0 : d1, static_cast<float>(q));
        }
    }
}

// Bytes of one row of `cols` elements, for the types above (0 for any other type).
KVSTASH_HOST_DEVICE constexpr int64_t row_bytes_of(TensorType type, int64_t cols) {
    switch (type) {
        case TensorType::F16:
        case TensorType::BF16: return cols * 2;
        case TensorType::Q8_0: return cols / 32 * 34;
        case TensorType::Q4_0: return cols / 32 * 18;
        case TensorType::Q4_1: return cols / 32 * 20;
        case TensorType::Q4_K: return cols / 256 * 144;
        case TensorType::Q5_K: return cols / 256 * 176;
        case TensorType::Q6_K: return cols / 256 * 210;
        default: return 0;
    }
}

}  // namespace kvstash::cuda::device
