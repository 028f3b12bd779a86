// exp_f32 on a row, on a given instruction set (backends/cpu/exp/exp_f32.h; the reference:
// reference/exp_f32_ref.cpp).
#include "backends/cpu/exp/exp_f32.h"

namespace kvstash::kernels {

void exp_f32_shifted_row(Isa isa, const float* in, float* out, int64_t n, float shift) {
    kernel_table(isa).exp_f32_shifted_row(in, out, n, shift);
}

}  // namespace kvstash::kernels
