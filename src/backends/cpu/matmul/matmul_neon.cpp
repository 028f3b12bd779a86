// The f32-activation matmul (f32 / f16 / bf16 weights) on aarch64 NEON: the one 16-lane definition
// (matmul_f32x16.h), each accumulator four q registers (lanes 4k..4k+3 in v[k]). The scalar reference's bits
// (docs/architecture/canonical-matmul.md).
#include "backends/cpu/matmul/matmul_f32x16.h"

namespace kvstash::kernels {
namespace {

// 32 q registers, 8 F32x16 of them, as AVX2's 16 ymm: the same tiling (matmul_avx2.cpp): 6 rows × 1 token for one
// token, 2 rows × 2 tokens for several, 64 tokens per pass over a decoded row tile, whole rows.
struct NeonTiling {
    static constexpr int kRowsOneToken = 6;
    static constexpr int kRows = 2;
    static constexpr int kTokens = 2;
    static constexpr int64_t kTokenBlock = 64;
    static constexpr int64_t kActivationBlockBytes = 0;
    static constexpr int64_t kColumnSlice = 0;
};

}  // namespace

void matmul_rows_neon(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    simd::matmul_float_rows<NeonTiling>(a, row_begin, row_end);
}

}  // namespace kvstash::kernels
