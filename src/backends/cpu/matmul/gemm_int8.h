// Many-token (prefill) GEMM of the integer-activation matmul (reference/matmul_int8_ref.cpp) on AVX-512 VNNI, with
// tiles of 32 weight rows × 1,024 columns (gemm_int8_avx512vnni.cpp). Bitwise equal to the scalar definition for
// every token count, row range and thread split: each output's integer block sums are exact and its float steps
// run in block order, whatever tile the row or token falls in.
#pragma once

#include <cstdint>

#include "backends/cpu/matmul/matmul_impl.h"

namespace kvstash::kernels {

// The AVX-512 VNNI integer-activation kernel of the dispatch table (backends/cpu/runtime/dispatch.cpp): the
// 32-row tiles for many tokens of q4_K / q6_K / q8_0 (read from args.tiles where the weights were repacked at load,
// repack_tiles.h: then from fewer tokens, few_tokens_max_repacked), matmul_int8_rows_avx512vnni otherwise. Only on a
// CPU with AVX-512 F/BW/VL/DQ + VNNI + VBMI. KVSTASH_GEMM=rows16 keeps every call on matmul_int8_rows_avx512vnni (the
// same bits; for side-by-side speed measurements, read once).
void gemm_int8_rows_avx512vnni(const MatmulArgs& args, int64_t row_begin, int64_t row_end);

// The same on AVX-512 F/BW/VL/DQ without VNNI (gemm_int8_avx512.cpp): the same tiles with vpmaddubsw + vpmaddwd (q8_0:
// int16 weights and vpmaddwd) for many tokens; matmul_int8_rows_avx2 for a few tokens. The same bits.
void gemm_int8_rows_avx512bw(const MatmulArgs& args, int64_t row_begin, int64_t row_end);

}  // namespace kvstash::kernels
