// Scalar reference quantizers: the inverses of dequantize_row (tensor_type.h), following ggml's
// quantize_row_*_ref operation for operation so that a block written here is the block ggml would write.
#pragma once

#include <cstdint>

namespace kvstash {

// q8_0: n floats (n a multiple of 32) -> n / 32 blocks of {fp16 d, int8 qs[32]} (34 bytes each), with
// d = max|x| / 127 and qs = round(x / d). Reconstruction error per element is at most d / 2 plus the
// rounding of d to fp16 (|q| × ulp(d) / 2 <= 127 × 2^-11 × d). Non-finite inputs, which a working model
// never produces, quantize to 0 instead of overflowing the int8 conversion.
// Throws Error(invalid_argument) if n is not a multiple of 32.
void quantize_row_q8_0(const float* src, void* dst, int64_t n);

// q4_K: n floats (n a multiple of 256) -> n / 256 super-blocks of 144 bytes {fp16 d, fp16 dmin, 12 bytes of
// eight 6-bit (scale, min) pairs, 128 bytes of 4-bit quants}, value = d × scale × q − dmin × min. Each
// 32-value sub-block gets its (scale, min) by ggml's weighted least-squares search (make_qkx2_quants: 21
// candidate scales, weights |x| + rms), then the pairs are quantized to 6 bits against the super-block's
// largest. ggml's quantize_row_q4_K_ref (what llama-quantize uses without an importance matrix), operation
// for operation in the same order without fused multiply-adds, so the blocks are bitwise ggml's
// (tests/fixtures/quant/q4_k_quantize_rows.json). Throws Error(invalid_argument) if n is not a multiple of 256.
void quantize_row_q4_K(const float* src, void* dst, int64_t n);

}  // namespace kvstash
