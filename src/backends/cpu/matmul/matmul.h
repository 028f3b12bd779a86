// Y = X · Wᵀ for a weight matrix W kept in its file type (never dequantized as a whole).
//   W: rows × cols, row-major, each row `tensor_row_bytes(type, cols)` bytes (a GGUF 2-D tensor with
//      dims {cols, rows}).
//   X: n_tokens × cols, f32, row stride `cols`.
//   Y: n_tokens × rows, f32, row stride `rows`:  Y[t][r] = sum_k W[r][k] * X[t][k].
// Batch invariance: Y[t][r] is bitwise the same function of (W[r], X[t]) whatever n_tokens, whatever
// the other rows of X, whatever the thread count. Each dot product has one fixed reduction order.
// One arithmetic per weight type, the same bits on every path (scalar, AVX2, AVX-512 with or without VNNI;
// docs/architecture/canonical-matmul.md): the block-quantized types (q4_0, q4_1, q5_0, q8_0, q4_K, q5_K,
// q6_K) multiply X[t] quantized on its own to 16-bit integers (backends/cpu/matmul/quantize_act.h) with exact
// integer block sums (backends/cpu/matmul/reference/matmul_int8_ref.cpp); f32 / f16 / bf16 use f32 activations
// and the 16-lane fma dot product of backends/cpu/matmul/reference/matmul_ref.cpp.
#pragma once

#include <cstdint>
#include <span>

#include "backends/cpu/runtime/dispatch.h"
#include "format/tensor_type.h"

namespace kvstash {

class ThreadPool;

void matmul(TensorType type, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tokens, float* Y,
            ThreadPool* pool, const void* tiles = nullptr);

// Several products of one input X (n_tokens × cols) with matrices of `cols` columns: Y_i = X · W_iᵀ
// (Y_i: n_tokens × rows_i). One thread-pool run for all of them, and X quantized once per activation
// block size: for the projections that read the same normalized rows (Q, K, V; gate, up). Each Y_i is
// bitwise what matmul(W_i) gives.
struct MatmulOperand {
    TensorType type;
    const void* W;
    int64_t rows;
    float* Y;
    // W repacked at load (repack_tiles.h: repack_tiles of this W), or null. The kernels that read that layout use it
    // (the same bits); every other path reads W.
    const void* tiles = nullptr;
};
void matmul_shared_input(std::span<const MatmulOperand> operands, int64_t cols, const float* X, int64_t n_tokens,
                         ThreadPool* pool);

// One dot product of a W row with an f32 vector, with the same arithmetic as `matmul` (so the two are
// bitwise equal). Used for single rows (embedding lookups go through dequantize_row instead).
float dot_row(TensorType type, const void* w_row, const float* x, int64_t cols);

// `matmul` and `dot_row` on a given path, whatever KVSTASH_ISA says (backends/cpu/runtime/dispatch.h). Throws
// Error(invalid_argument) if this CPU cannot run `isa`. Every ISA gives the same bits (the canonical
// arithmetic above).
// `tiles`: W repacked (repack_tiles.h), or null, as MatmulOperand::tiles.
void matmul_with(Isa isa, TensorType type, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tokens,
                 float* Y, ThreadPool* pool, const void* tiles = nullptr);
float dot_row_with(Isa isa, TensorType type, const void* w_row, const float* x, int64_t cols);

// The integer-activation product (backends/cpu/matmul/quantize_act.h, reference/matmul_int8_ref.cpp) of a
// block-quantized type on `isa`, whether or not matmul() uses it for that type (tests, benchmarks).
// Every ISA gives the same bits. Throws Error(invalid_argument) for f32 / f16 / bf16.
void matmul_integer_with(Isa isa, TensorType type, const void* W, int64_t rows, int64_t cols, const float* X,
                         int64_t n_tokens, float* Y, ThreadPool* pool, const void* tiles = nullptr);

namespace reference {
// Scalar reference with f32 activations for every type: dequantize_row then the canonical 16-lane fma dot
// product (reference/matmul_ref.cpp). matmul() equals it bitwise for f32 / f16 / bf16; the integer path of
// the quantized types is tested against it with a tolerance derived from the operands.
void matmul(TensorType type, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tokens, float* Y);
}  // namespace reference

}  // namespace kvstash
