// Internal interface between the matmul dispatcher (matmul.cpp) and the per-ISA kernels.
//
// Every kernel computes, for rows [row_begin, row_end) of W and every token t:
//     Y[t * y_stride + r] = dot(decoded W[r], X[t])
// with one reduction order per (ISA, cols) that does not depend on n_tokens, on the row range, on the
// tile a row or token falls in, or on the other tokens in X. The dispatcher splits rows across threads.
#pragma once

#include <cstdint>

#include "backends/cpu/runtime/dispatch.h"
#include "format/tensor_type.h"

namespace kvstash::kernels {

struct QuantizedActivations;

struct MatmulArgs {
    TensorType type;
    const uint8_t* W;    // rows × row_bytes
    uint64_t row_bytes;  // tensor_row_bytes(type, cols)
    int64_t cols;
    const float* X;  // n_tokens × cols
    int64_t n_tokens;
    float* Y;          // n_tokens × y_stride
    int64_t y_stride;  // usually `rows`
    // The integer-activation path (quantize_act.h): X quantized per row; the integer kernels read this
    // instead of X.
    const QuantizedActivations* xq = nullptr;
    // Kernels that prefetch the weights ahead may prefetch past row_end up to this row (exclusive, at most the
    // matrix's rows): the rows the same thread reads next (decode's contiguous shares, matmul.cpp). 0: only up
    // to row_end. Prefetching never changes a result.
    int64_t prefetch_row_end = 0;
    // The matrix repacked at load for the AVX-512 32-row tiles (repack_tiles.h), or null: the kernels that read
    // that layout use it instead of W (the same values, so the same bits); every other kernel reads W.
    const uint8_t* tiles = nullptr;
};

// MatmulRowsFn (backends/cpu/runtime/dispatch.h): one of these, chosen by the ISA's kernel table.

// Scalar: dequantize_row then the canonical 16-lane f32 dot product (reference/matmul_ref.cpp). This is
// reference::matmul; matmul() runs it (and the ISA versions below, bitwise equal to it) for f32 / f16 / bf16.
namespace reference {
void matmul_rows_scalar(const MatmulArgs& args, int64_t row_begin, int64_t row_end);
}  // namespace reference
// AVX2 + FMA + F16C (matmul_avx2.cpp) and AVX-512 F/BW/VL/DQ (matmul_avx512.cpp): one definition over
// simd::F32x16 (matmul_f32x16.h), the scalar reference's bits, for f32 / f16 / bf16 weights only. Only call
// them on a CPU that has the instructions.
void matmul_rows_avx2(const MatmulArgs& args, int64_t row_begin, int64_t row_end);
void matmul_rows_avx512(const MatmulArgs& args, int64_t row_begin, int64_t row_end);
// aarch64 NEON (matmul_neon.cpp): the scalar reference's bits.
void matmul_rows_neon(const MatmulArgs& args, int64_t row_begin, int64_t row_end);

// The quantized weight types with int8 activations (args.xq), all with the arithmetic defined in
// reference/matmul_int8_ref.cpp, bitwise equal to each other:
//   scalar (the definition), AVX2 (matmul_int8_avx2.cpp: vpmaddwd kernels for q8_0, q5_0, q4_0, q4_1, the definition's
//   code vectorized by the compiler for the other types),
//   AVX-512 F/BW/VL/DQ + VNNI + VBMI (matmul_int8_avx512vnni.cpp, matmul_int8_decode*_avx512vnni.cpp; the tiles of
//   matmul_int8_avx512_tiles.h, which gemm_int8_avx512.cpp also compiles for AVX-512 F/BW without VNNI, gemm_int8.h).
namespace reference {
void matmul_int8_rows_scalar(const MatmulArgs& args, int64_t row_begin, int64_t row_end);
}  // namespace reference
void matmul_int8_rows_avx2(const MatmulArgs& args, int64_t row_begin, int64_t row_end);
// q4_K / q5_K / q6_K rows of matmul_int8_rows_avx2 (matmul_int8_kquant_avx2.cpp).
void matmul_int8_rows_kquant_avx2(const MatmulArgs& args, int64_t row_begin, int64_t row_end);
void matmul_int8_rows_avx512vnni(const MatmulArgs& args, int64_t row_begin, int64_t row_end);
// aarch64 (matmul_int8_neon.h): every block type, the block sums with NEON's widening multiplies
// (matmul_int8_neon.cpp) or with the dot-product instructions where the CPU has them (matmul_int8_neon_dotprod.cpp).
void matmul_int8_rows_neon(const MatmulArgs& args, int64_t row_begin, int64_t row_end);
void matmul_int8_rows_neon_dotprod(const MatmulArgs& args, int64_t row_begin, int64_t row_end);

// Unpacks scale / min j (0..7) of a q4_K / q5_K super-block from its 12 packed bytes (ggml
// get_scale_min_k4).
inline void k_quant_scale_min(int j, const uint8_t* q, int* scale, int* min) {
    if (j < 4) {
        *scale = q[j] & 63;
        *min = q[j + 4] & 63;
    } else {
        *scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

}  // namespace kvstash::kernels
