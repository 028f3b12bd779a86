// The integer-activation matmul on aarch64 NEON, for every block-quantized type: the definition of
// reference/matmul_int8_ref.cpp (see there) with its exact integer block sums formed 16 products at a time. Included
// by matmul_int8_neon.cpp (KVSTASH_NEON_DOTPROD 0: widening multiplies, smull + sadalp, on every aarch64 CPU) and
// matmul_int8_neon_dotprod.cpp (1: sdot, compiled with +dotprod, chosen where the CPU reports it). Integer sums are
// exact whatever their grouping, and the float steps are the definition's, in its order, so both give the scalar
// reference's bits (docs/architecture/canonical-matmul.md).
//
// Each weight row is unpacked once into its integer weights, one int8 per element in element order (the
// definition's wq: every type's fit in int8), then multiplied with every token's two activation planes h and l.
#pragma once

#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/runtime/scratch.h"

#if !defined(KVSTASH_NEON_DOTPROD)
#error "matmul_int8_neon.h: define KVSTASH_NEON_DOTPROD (0 or 1) before including it"
#endif
#if KVSTASH_NEON_DOTPROD && !defined(__ARM_FEATURE_DOTPROD)
#error "matmul_int8_neon.h: KVSTASH_NEON_DOTPROD needs -march=armv8.2-a+dotprod (CMakeLists.txt)"
#endif

namespace kvstash::kernels::neon_int8 {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including file

// acc + the 16 products w[i]·x[i], grouped in 4 lanes (exact: |w·x| <= 2^14, a lane's sum far below 2^31).
inline int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t x) {
#if KVSTASH_NEON_DOTPROD
    return vdotq_s32(acc, w, x);
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(x));  // |product| <= 128·128: fits int16
    const int16x8_t hi = vmull_high_s8(w, x);
    return vpadalq_s16(vpadalq_s16(acc, lo), hi);
#endif
}

// Σ w[i]·x[i] over n = 16 or 32 elements.
inline int32_t dot(const int8_t* w, const int8_t* x, int n) {
    int32x4_t acc = vdupq_n_s32(0);
    for (int i = 0; i < n; i += 16) acc = dot16(acc, vld1q_s8(w + i), vld1q_s8(x + i));
    return vaddvq_s32(acc);
}

inline float fp16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_fp32(h);
}

inline int8x16_t as_signed(uint8x16_t v) { return vreinterpretq_s8_u8(v); }

// The integer weights of one block (block_ints in matmul_int8_dot.h), as int8 into q.
inline void unpack_block(TensorType type, const uint8_t* w, int8_t* q) {
    if (type == kTensorTypeQ5_0) {  // fp16 d, qh (bit j: fifth bit of element j), 16 nibble bytes; q - 16
        uint32_t qh;
        std::memcpy(&qh, w + 2, 4);
        const uint8_t* qs = w + 6;
        for (int i = 0; i < 16; ++i) {
            q[i] = static_cast<int8_t>(static_cast<int>((qs[i] & 0x0F) | (((qh >> i) & 1u) << 4)) - 16);
            q[i + 16] = static_cast<int8_t>(static_cast<int>((qs[i] >> 4) | (((qh >> (i + 16)) & 1u) << 4)) - 16);
        }
        return;
    }
    const uint8x16_t nibble = vdupq_n_u8(0x0F);
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q4_1: {  // element i: low nibble of byte i, element 16 + i: its high nibble
            const uint8x16_t qs = vld1q_u8(w + (type == TensorType::Q4_1 ? 4 : 2));
            const int8x16_t offset = vdupq_n_s8(type == TensorType::Q4_0 ? 8 : 0);
            vst1q_s8(q, vsubq_s8(as_signed(vandq_u8(qs, nibble)), offset));
            vst1q_s8(q + 16, vsubq_s8(as_signed(vshrq_n_u8(qs, 4)), offset));
            return;
        }
        case TensorType::Q8_0: std::memcpy(q, w + 2, 32); return;
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            // Sub-block j (32 elements): the low (j even) or high nibbles of bytes 32 (j / 2) .. of qs; q5_K's fifth
            // bit of element l is bit j of qh[l].
            const bool five = type == TensorType::Q5_K;
            const uint8_t* qh = w + 16;
            const uint8_t* qs = w + (five ? 48 : 16);
            for (int j = 0; j < 8; ++j) {
                for (int half = 0; half < 2; ++half) {
                    const uint8x16_t bytes = vld1q_u8(qs + 32 * (j / 2) + 16 * half);
                    uint8x16_t v = j % 2 == 0 ? vandq_u8(bytes, nibble) : vshrq_n_u8(bytes, 4);
                    if (five) {
                        const uint8x16_t set =
                            vtstq_u8(vld1q_u8(qh + 16 * half), vdupq_n_u8(static_cast<uint8_t>(1u << j)));
                        v = vorrq_u8(v, vandq_u8(set, vdupq_n_u8(16)));
                    }
                    vst1q_s8(q + 32 * j + 16 * half, as_signed(v));
                }
            }
            return;
        }
        case TensorType::Q6_K:
            // Element e = 128 h + 32 k + l (l < 32): 4 low bits from ql[64 h + 32 (k % 2) + l] (the low nibble for
            // k < 2), 2 high bits from qh[32 h + l] (bits 2k, 2k+1); q - 32.
            for (int h = 0; h < 2; ++h) {
                for (int k = 0; k < 4; ++k) {
                    for (int half = 0; half < 2; ++half) {
                        const uint8x16_t ql = vld1q_u8(w + 64 * h + 32 * (k % 2) + 16 * half);
                        const uint8x16_t qh = vld1q_u8(w + 128 + 32 * h + 16 * half);
                        const uint8x16_t low = k < 2 ? vandq_u8(ql, nibble) : vshrq_n_u8(ql, 4);
                        const uint8x16_t high =
                            vandq_u8(vshlq_u8(qh, vdupq_n_s8(static_cast<int8_t>(-2 * k))), vdupq_n_u8(3));
                        const uint8x16_t v = vorrq_u8(low, vshlq_n_u8(high, 4));
                        vst1q_s8(q + 128 * h + 32 * k + 16 * half, vsubq_s8(as_signed(v), vdupq_n_s8(32)));
                    }
                }
            }
            return;
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: return;
    }
}

// One output: weight row w (its integer weights unpacked at q), activation row t of xa. The float steps are
// dot_int8's (matmul_int8_dot.h), in its order.
inline float dot_row(TensorType type, const uint8_t* w, const int8_t* q, const QuantizedActivations& xa, int64_t t) {
    const int8_t* xh = xa.h_row(t);
    const int8_t* xl = xa.l_row(t);
    const float* dx = xa.d_row(t);
    const int32_t* h32 = xa.h32_row(t);
    const int32_t* l32 = xa.l32_row(t);
    const int64_t cols = xa.cols;
    const uint32_t bytes = tensor_type_traits(type).type_size;
    float acc = 0.0f;
    if (tensor_type_traits(type).block_size == 32) {
        for (int64_t b = 0; b < cols / 32; ++b, w += bytes) {
            const int8_t* bq = q + 32 * b;
            const int32_t s = 256 * dot(bq, xh + 32 * b, 32) + dot(bq, xl + 32 * b, 32);
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
        const int8_t* bq = q + 256 * b;
        const int8_t* bh = xh + 256 * b;
        const int8_t* bl = xl + 256 * b;
        int32_t s_h = 0, s_l = 0;
        if (type == TensorType::Q6_K) {
            const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
            for (int j = 0; j < 16; ++j) {
                s_h += sc[j] * dot(bq + 16 * j, bh + 16 * j, 16);
                s_l += sc[j] * dot(bq + 16 * j, bl + 16 * j, 16);
            }
            const float d = fp16_at(w + 208);
            const int64_t s = 256 * static_cast<int64_t>(s_h) + s_l;
            acc = std::fma(d * dx[b], static_cast<float>(s), acc);
            continue;
        }
        int32_t m = 0;
        for (int j = 0; j < 8; ++j) {
            int sc = 0, mn = 0;
            k_quant_scale_min(j, w + 4, &sc, &mn);
            s_h += sc * dot(bq + 32 * j, bh + 32 * j, 32);
            s_l += sc * dot(bq + 32 * j, bl + 32 * j, 32);
            m += mn * (256 * h32[8 * b + j] + l32[8 * b + j]);
        }
        const float d = fp16_at(w);
        const float cm = fp16_at(w + 2) * dx[b];
        const int64_t s = 256 * static_cast<int64_t>(s_h) + s_l;
        acc = std::fma(d * dx[b], static_cast<float>(s), acc);
        acc = std::fma(-cm, static_cast<float>(m), acc);
    }
    return acc;
}

inline void matmul_int8_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    thread_local ScratchArray ints_buf;
    auto* q = reinterpret_cast<int8_t*>(ints_buf.bytes(static_cast<size_t>(a.cols)));
    const uint32_t block = tensor_type_traits(a.type).block_size;
    const uint32_t bytes = tensor_type_traits(a.type).type_size;
    for (int64_t r = row_begin; r < row_end; ++r) {
        const uint8_t* w = a.W + static_cast<uint64_t>(r) * a.row_bytes;
        for (int64_t b = 0; b < a.cols / block; ++b) unpack_block(a.type, w + b * bytes, q + b * block);
        for (int64_t t = 0; t < a.n_tokens; ++t) a.Y[t * a.y_stride + r] = dot_row(a.type, w, q, *a.xq, t);
    }
}

}  // namespace
}  // namespace kvstash::kernels::neon_int8
