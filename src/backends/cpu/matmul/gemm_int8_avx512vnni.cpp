// The AVX-512 VNNI integer-activation kernel of the dispatch table (gemm_int8.h): the 32-row tiles of
// gemm_int8_avx512_tiles.h compiled with vpdpbusd for many tokens of q4_K / q6_K / q8_0 (and of q4_0 / q4_1 where
// repacked), matmul_int8_rows_avx512vnni (16-row tiles, or the decode and few-token kernels for a few tokens)
// otherwise.
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/gemm_int8.h"
#include "backends/cpu/matmul/gemm_int8_avx512_repacked.h"

namespace kvstash::kernels {

void gemm_int8_rows_avx512vnni(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const bool repacked = a.tiles != nullptr && gemm32::reads_repacked(a.type);
    const int64_t few = repacked ? int8_avx512::few_tokens_max_repacked(a.type) : int8_avx512::few_tokens_max(a.type);
    if (a.n_tokens <= few || (!repacked && !gemm32::has_tiles(a.type)) || gemm32::rows16_only()) {
        // At most few_tokens_max(type) tokens: the decode and few-token kernels; more: the 16-row tiles.
        return matmul_int8_rows_avx512vnni(a, row_begin, row_end);
    }
    gemm32::tiles_any_rows(a, row_begin, row_end);  // repacked: q4_0 / q4_1 too (they have no unrepacked 32-row tile)
}

}  // namespace kvstash::kernels
