// AVX2 path of the int8-activation matmul: the scalar definition (matmul_int8_dot.h) compiled with
// AVX2 + FMA, so that GCC vectorizes its integer loops. Bitwise equal to the scalar path.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#define KVSTASH_INT8_DOT_NAMESPACE int8_avx2
#include "kernels/matmul_int8_dot.h"

namespace kvstash::kernels {

void matmul_int8_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    for (int64_t r = row_begin; r < row_end; ++r) {
        const uint8_t* w = a.W + static_cast<uint64_t>(r) * a.row_bytes;
        for (int64_t t = 0; t < a.n_tokens; ++t) a.Y[t * a.y_stride + r] = int8_avx2::dot_int8(a.type, w, *a.xq, t);
    }
}

}  // namespace kvstash::kernels
