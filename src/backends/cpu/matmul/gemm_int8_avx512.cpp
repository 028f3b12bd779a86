// The integer-activation kernel of the dispatch table on AVX-512 without VNNI (Skylake-SP/X, or
// KVSTASH_ISA=avx512-novnni; gemm_int8.h): the VNNI path's many-token tiles (gemm_int8_avx512_tiles.h: 32 rows for
// q4_K, q6_K and q8_0; matmul_int8_avx512_tiles.h: 16 rows for q4_0, q4_1, q5_K) compiled for AVX-512 F/BW with
// vpmaddubsw + vpmaddwd in place of vpdpbusd (int8_dot_avx512.h: exact, the same integers), and q8_0 (which q5_0
// is repacked to on this path) on int16 weights with vpmaddwd; so bitwise the scalar definition.
// A few tokens (decode, up to kAvx2TokensMax) stay on the AVX2 integer kernels (matmul_int8_rows_avx2, the same
// bits): the VNNI decode kernels need vpdpbusd on the weights as they lie and VBMI byte permutes, and decode is bound
// by reading the weights from memory (docs/benchmarks-history.md: the no-VNNI decode within noise of its former
// 512-bit kernels).
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/gemm_int8.h"
#include "backends/cpu/matmul/gemm_int8_avx512_repacked.h"
#include "backends/cpu/matmul/matmul_int8_avx512_tiles.h"

#if defined(__AVX512VNNI__)
#error "gemm_int8_avx512.cpp is the path without VNNI: compile it for AVX-512 F/BW/VL/DQ only (CMakeLists.txt)"
#endif

namespace kvstash::kernels {
namespace {
// Token counts up to this take the AVX2 kernels (the VNNI path's few-token kernels need vpdpbusd; measured when
// this path's tiles were written: 8, the VNNI path's decode limit then).
constexpr int64_t kAvx2TokensMax = 8;
}  // namespace

void gemm_int8_rows_avx512bw(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.n_tokens > kAvx2TokensMax) {
        if (gemm32::has_tiles(a.type) && !gemm32::rows16_only()) return gemm32::tiles_any_rows(a, row_begin, row_end);
        if (has_unsigned_tile(a.type))
            return rows16::packed_rows(a, row_begin, row_end);  // KVSTASH_GEMM=rows16: not q8_0
    }
    matmul_int8_rows_avx2(a, row_begin, row_end);
}

}  // namespace kvstash::kernels
