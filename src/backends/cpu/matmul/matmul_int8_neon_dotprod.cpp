// The integer-activation matmul on aarch64 CPUs with the dot-product instructions (FEAT_DotProd: HWCAP_ASIMDDP,
// backends/cpu/runtime/dispatch.cpp): matmul_int8_neon.h with the block sums by sdot. Compiled with
// -march=armv8.2-a+dotprod (CMakeLists.txt), called only where the CPU has it. The scalar reference's bits.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written (fma only where asked for)

#define KVSTASH_NEON_DOTPROD 1
#include "backends/cpu/matmul/matmul_int8_neon.h"

namespace kvstash::kernels {

void matmul_int8_rows_neon_dotprod(const MatmulArgs& args, int64_t row_begin, int64_t row_end) {
    neon_int8::matmul_int8_rows(args, row_begin, row_end);
}

}  // namespace kvstash::kernels
