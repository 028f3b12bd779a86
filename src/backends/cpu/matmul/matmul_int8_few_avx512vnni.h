// The AVX-512 VNNI integer-activation matmul for a few tokens (3 .. few_tokens_max(type): speculative
// verification, continuous batching of a few sequences): matmul_int8_few_avx512vnni.cpp (32-element blocks:
// q4_0, q4_1, q8_0) and matmul_int8_few_kquant_avx512vnni.cpp (q4_K, q5_K, q6_K). Include only from files
// compiled with AVX-512 F/BW/VL/DQ + VNNI + VBMI (named *_avx512vnni.cpp).
//
// Read and unpack once, multiply per token pair. The decode kernels (matmul_int8_decode_avx512vnni.h) keep 16
// row vectors per token in registers for the reduction tree, so they take at most 2 tokens, and 3..8 tokens
// used to re-read and re-unpack every weight once per pair. Here, per 16-row tile and block group (a pair
// of 32-element blocks, or one K-quant super-block), the 16 rows' weight vectors (and scales) are unpacked
// once into a small buffer in L1 (1 to 9 KiB), then every pair of tokens (and a last single one) runs the
// decode kernels' products over the buffered vectors: the same vpdpbusd / vpdpwssd, the rows reduced by
// pair_step, the same float steps per output in block order, with the accumulators of all tokens kept
// in memory between block groups. The integer sums are exact, so every output is bitwise the decode
// kernels' and the scalar definition's (reference/matmul_int8_ref.cpp).
#pragma once

#include "backends/cpu/matmul/matmul_int8_decode_avx512vnni.h"

namespace kvstash::kernels::int8_avx512 {

// Rows [row_begin, row_end) of a product of any token count (a.n_tokens >= 1; meant for 3 ..
// few_tokens_max(type)), any integer-path type.
void few_tokens_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
// The same by family.
void few_tokens_rows_blocks32(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
void few_tokens_rows_super_blocks(const MatmulArgs& a, int64_t row_begin, int64_t row_end);

}  // namespace kvstash::kernels::int8_avx512
