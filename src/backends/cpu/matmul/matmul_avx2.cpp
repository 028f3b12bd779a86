// The f32-activation matmul (f32 / f16 / bf16 weights) on AVX2 + FMA + F16C: the one 16-lane definition
// (matmul_f32x16.h), each accumulator two ymm registers (lanes 0-7, 8-15).
#include "backends/cpu/matmul/matmul_f32x16.h"

namespace kvstash::kernels {
namespace {

// 16 ymm registers: 6 rows × 1 token for one token (12 accumulator registers, the token's 2, the weights read
// from memory by the fma), 2 rows × 2 tokens for several (8 accumulator registers, 4 of weights, 2 of a token).
// 64 tokens per pass over a decoded row tile, whole rows (no column slices).
struct Avx2Tiling {
    static constexpr int kRowsOneToken = 6;
    static constexpr int kRows = 2;
    static constexpr int kTokens = 2;
    static constexpr int64_t kTokenBlock = 64;
    static constexpr int64_t kActivationBlockBytes = 0;
    static constexpr int64_t kColumnSlice = 0;
};

}  // namespace

void matmul_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    simd::matmul_float_rows<Avx2Tiling>(a, row_begin, row_end);
}

}  // namespace kvstash::kernels
