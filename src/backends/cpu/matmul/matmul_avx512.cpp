// The f32-activation matmul (f32 / f16 / bf16 weights) on AVX-512 F/BW/VL/DQ: the one 16-lane definition
// (matmul_f32x16.h), each accumulator one zmm register.
#include "backends/cpu/matmul/matmul_f32x16.h"

namespace kvstash::kernels {
namespace {

// 32 zmm registers: 4 rows × 6 tokens (24 accumulators, 4 of weights, 1 of a token), also for one token.
// Tokens per pass: up to 64, fewer where their activations would pass 768 KiB (kept in L2); column slices of
// about 512 (a 4-row tile's slice, 8 KiB, stays in L1 while the token tiles stream past it).
struct Avx512Tiling {
    static constexpr int kRowsOneToken = 4;
    static constexpr int kRows = 4;
    static constexpr int kTokens = 6;
    static constexpr int64_t kTokenBlock = 64;
    static constexpr int64_t kActivationBlockBytes = 786432;
    static constexpr int64_t kColumnSlice = 512;
};

}  // namespace

void matmul_rows_avx512(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    simd::matmul_float_rows<Avx512Tiling>(a, row_begin, row_end);
}

}  // namespace kvstash::kernels
