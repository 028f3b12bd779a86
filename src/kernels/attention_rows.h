// The two inner loops of attention, per instruction set:
//   dot:  q · k_row over n elements, k_row stored as f16 or f32;
//   axpy: out[i] += w * v_row[i] over n elements;
//   exp_shifted: the softmax numerators out[j] = exp_f32(in[j] - max) (kernels/exp_f32.h), which give
//         the same bits on every ISA.
// Each has one fixed arithmetic sequence for a given ISA (lanes over the element index, then a fixed
// horizontal sum), so attention stays batch-invariant on every path. The scalar versions are the
// reference the SIMD ones are tested against (tests/unit/attention_rows_test.cpp).
#pragma once

#include <cstdint>

#include "format/tensor_type.h"
#include "kernels/dispatch.h"

namespace kvstash::kernels {

struct AttentionRowOps {
    float (*dot)(const float* q, const uint8_t* k_row, int64_t n, TensorType type);
    void (*axpy)(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type);
    void (*exp_shifted)(const float* in, float* out, int64_t n, float shift);
};

// The operations of `isa` (kernels/dispatch.h: one of available_isas(), not checked).
AttentionRowOps attention_row_ops(Isa isa);

namespace reference {
float attention_dot(const float* q, const uint8_t* k_row, int64_t n, TensorType type);
void attention_axpy(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type);
}  // namespace reference

float attention_dot_avx2(const float* q, const uint8_t* k_row, int64_t n, TensorType type);
void attention_axpy_avx2(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type);
float attention_dot_avx512(const float* q, const uint8_t* k_row, int64_t n, TensorType type);
void attention_axpy_avx512(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type);

}  // namespace kvstash::kernels
