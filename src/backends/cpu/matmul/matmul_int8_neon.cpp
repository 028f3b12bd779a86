// The integer-activation matmul on aarch64 without the dot-product instructions: matmul_int8_neon.h with the block
// sums by widening multiplies (smull, sadalp), on every aarch64 CPU. The scalar reference's bits.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#define KVSTASH_NEON_DOTPROD 0
#include "backends/cpu/matmul/matmul_int8_neon.h"

namespace kvstash::kernels {

void matmul_int8_rows_neon(const MatmulArgs& args, int64_t row_begin, int64_t row_end) {
    neon_int8::matmul_int8_rows(args, row_begin, row_end);
}

}  // namespace kvstash::kernels
