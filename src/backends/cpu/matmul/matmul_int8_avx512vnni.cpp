// AVX-512 VNNI matmul for the quantized weight types (bitwise the scalar definition, reference/matmul_int8_ref.cpp):
// the many-token 16-row tiles of matmul_int8_avx512_tiles.h compiled with vpdpbusd, the decode and few-token kernels
// (matmul_int8_decode*_avx512vnni.cpp, matmul_int8_few*_avx512vnni.cpp) for a few tokens.
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/matmul_int8_avx512_tiles.h"

namespace kvstash::kernels {

// Up to few_tokens_max(type) tokens go to the decode and few-token kernels (decode_rows), more to the 16-row tiles.
void matmul_int8_rows_avx512vnni(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.n_tokens <= int8_avx512::few_tokens_max(a.type)) return int8_avx512::decode_rows(a, row_begin, row_end);
    rows16::packed_rows(a, row_begin, row_end);
}

}  // namespace kvstash::kernels
