// The f32-activation matmul (f32 / f16 / bf16 weights) on AVX2 + FMA + F16C: the one 16-lane definition
// (matmul_f32x16.h), each accumulator two ymm registers (lanes 0-7, 8-15), in 16 ymm registers.
#include "backends/cpu/matmul/matmul_f32x16.h"

namespace kvstash::kernels {

void matmul_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    simd::matmul_float_rows<simd::EightVectorTiling>(a, row_begin, row_end);
}

}  // namespace kvstash::kernels
