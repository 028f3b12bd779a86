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

}  // namespace kvstash
