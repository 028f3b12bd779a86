// exp_f32_shifted_row on aarch64: the one 16-lane definition (exp_f32x16.h), as four NEON registers.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#include "backends/cpu/exp/exp_f32x16.h"

namespace kvstash::kernels {

void exp_f32_shifted_row_neon(const float* in, float* out, int64_t n, float shift) {
    simd::exp_f32_shifted_row(in, out, n, shift);
}

}  // namespace kvstash::kernels
