// The f32-activation matmul (f32 / f16 / bf16 weights) on aarch64 NEON: the one 16-lane definition
// (matmul_f32x16.h), each accumulator four q registers (lanes 4k..4k+3 in v[k]), in 32 q registers: AVX2's
// tiling. The scalar reference's bits (docs/architecture/canonical-matmul.md).
#include "backends/cpu/matmul/matmul_f32x16.h"

namespace kvstash::kernels {

void matmul_rows_neon(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    simd::matmul_float_rows<simd::EightVectorTiling>(a, row_begin, row_end);
}

}  // namespace kvstash::kernels
