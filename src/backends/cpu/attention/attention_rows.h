// The two inner loops of attention, per instruction set:
//   dot:  q · k_row over n elements, k_row stored as f16, f32 or q8_0;
//   axpy: out[i] += w * v_row[i] over n elements;
//   exp_shifted: the softmax numerators out[j] = exp_f32(in[j] - max) (backends/cpu/exp/exp_f32.h).
// One arithmetic on every ISA (docs/architecture/canonical-float-ops.md), defined by the scalar reference
// (reference/attention_rows_ref.cpp), which the vector ISAs give bitwise (tests/unit/attention_rows_test.cpp):
//   dot:  16 partial sums, element i in lane i mod 16, each p = fma(q[i], k[i], p) in increasing i from +0;
//         then p[j] + p[j+8] (j < 8), + 4, + 2, + 1 (the canonical tree);
//   axpy: out[i] = fma(w, v[i], out[i]).
#pragma once

#include <cstdint>

#include <cstring>

#include "backends/cpu/runtime/dispatch.h"
#include "format/tensor_type.h"

namespace kvstash::kernels {

// A q8_0 row (ggml's block_q8_0: 34-byte blocks of an f16 scale d and 32 int8 q) is read as d * q in f32:
// an f16 (11 significant bits) times an int8 (8 bits) is exact in f32, so every path (scalar, AVX2, the
// group kernels) reads bitwise the same values, and from there does exactly its f32 arithmetic. A q8_0
// row or head starts on a block boundary (head_dim a multiple of 32). (Internal linkage: this header is
// included by *_avx2.cpp / *_avx512.cpp files too, which must define no weak symbols.)
namespace {

inline constexpr int64_t kQ8_0BlockValues = 32;
inline constexpr int64_t kQ8_0BlockBytes = 34;

// Element i of the q8_0 row at `row`.
inline float q8_0_value(const uint8_t* row, int64_t i) {
    const uint8_t* block = row + (i / kQ8_0BlockValues) * kQ8_0BlockBytes;
    uint16_t d = 0;
    std::memcpy(&d, block, 2);
    return fp16_to_fp32(d) * static_cast<float>(static_cast<int8_t>(block[2 + i % kQ8_0BlockValues]));
}

// Bytes before element i of a KV row of `type` (i a multiple of 32 for q8_0).
inline uint64_t kv_row_offset(TensorType type, int64_t i) {
    switch (type) {
        case TensorType::F16: return static_cast<uint64_t>(i) * 2;
        case TensorType::Q8_0: return static_cast<uint64_t>(i / kQ8_0BlockValues) * kQ8_0BlockBytes;
        default: return static_cast<uint64_t>(i) * 4;
    }
}

}  // namespace

// Partial sums of the dot product (the lanes of simd::F32x16).
inline constexpr int kAttentionDotLanes = 16;

struct AttentionRowOps {
    float (*dot)(const float* q, const uint8_t* k_row, int64_t n, TensorType type);
    void (*axpy)(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type);
    void (*exp_shifted)(const float* in, float* out, int64_t n, float shift);
};

// The operations of `isa` (backends/cpu/runtime/dispatch.h: one of available_isas(), not checked).
AttentionRowOps attention_row_ops(Isa isa);

namespace reference {
float attention_dot(const float* q, const uint8_t* k_row, int64_t n, TensorType type);
void attention_axpy(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type);
}  // namespace reference

float attention_dot_avx2(const float* q, const uint8_t* k_row, int64_t n, TensorType type);
void attention_axpy_avx2(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type);
float attention_dot_avx512(const float* q, const uint8_t* k_row, int64_t n, TensorType type);
void attention_axpy_avx512(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type);
// aarch64 (attention_rows_neon.cpp): the same bits.
float attention_dot_neon(const float* q, const uint8_t* k_row, int64_t n, TensorType type);
void attention_axpy_neon(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type);

}  // namespace kvstash::kernels
