// The integer-activation kernel of the dispatch table on AVX-512 without VNNI (Skylake-SP/X, or
// KVSTASH_ISA=avx512-novnni; gemm_int8.h): the VNNI path's many-token tiles (gemm_int8_avx512_tiles.h: 32 rows for
// q4_K / q6_K; matmul_int8_avx512_tiles.h: 16 rows for q4_0, q4_1, q5_K) compiled for AVX-512 F/BW with vpmaddubsw +
// vpmaddwd in place of vpdpbusd (int8_dot_avx512.h: exact, the same integers), so bitwise the scalar definition.
// The AVX2 integer kernels (matmul_int8_rows_avx2, the same bits) keep what these do not take:
//   * a few tokens (decode, up to kFewTokensChunkedMax): the VNNI decode kernels need vpdpbusd on the weights as they
//     lie and VBMI byte permutes; the AVX2 ones are bound by reading the weights from memory, as 512-bit ones would be
//     (docs/benchmarks-history.md: the no-VNNI decode within noise of its former 512-bit kernels);
//   * q8_0 (and q5_0, which this path reads as q8_0): its unsigned weights q + 128 (up to 255) would saturate
//     vpmaddubsw's int16 pair sums; the AVX2 kernels multiply int16 weights with int16 activations instead.
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/gemm_int8.h"
#include "backends/cpu/matmul/gemm_int8_avx512_tiles.h"
#include "backends/cpu/matmul/matmul_int8_avx512_tiles.h"

#if defined(__AVX512VNNI__)
#error "gemm_int8_avx512.cpp is the path without VNNI: compile it for AVX-512 F/BW/VL/DQ only (CMakeLists.txt)"
#endif

namespace kvstash::kernels {

void gemm_int8_rows_avx512bw(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.n_tokens <= int8_avx512::kFewTokensChunkedMax || !has_unsigned_tile(a.type)) {
        return matmul_int8_rows_avx2(a, row_begin, row_end);
    }
    if (gemm32::has_tiles(a.type) && !gemm32::rows16_only()) return gemm32::tile_rows(a, row_begin, row_end);
    rows16::packed_rows(a, row_begin, row_end);
}

}  // namespace kvstash::kernels
