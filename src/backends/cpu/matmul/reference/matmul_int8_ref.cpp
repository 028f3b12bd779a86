// Scalar reference of the int8-activation matmul (the quantized weight types). It doubles as the
// "scalar" ISA path for those types, and every SIMD path must equal it bitwise.
//
// Definition of one output Y[t][r] (weight row r; activation row t quantized by quantize_act.h into
// blocks with scales dx[b] and 16-bit integers q = 256·h + l held as two int8 planes h, l):
//   acc = 0.0f
//   for each weight block b in order:
//     integer weights wq of the block: q4_0: q - 8; q4_1: q; q8_0: q; q5_0: q - 16; q4_K / q5_K: q; q6_K: q - 32
//     32-element blocks (q4_0, q4_1, q8_0, q5_0):
//       S_b = 256 · sum wq·h + sum wq·l                  (int32, exact: |S_b| <= 32·128·32639 < 2^31)
//       acc = fma(fl(d · dx[b]), float(S_b), acc)            d = the block's fp16 scale as f32
//       q4_1 only: acc = fma(m, fl(dx[b] · float(sum q)), acc)   m = the block's fp16 min
//     K-quants (256 elements; q4_K / q5_K: 8 sub-blocks of 32 with 6-bit scales sc_j and mins m_j;
//               q6_K: 16 sub-blocks of 16 with int8 scales sc_j):
//       S_b = 256 · sum_j sc_j · sum_{e in j} wq_e·h_e + sum_j sc_j · sum_{e in j} wq_e·l_e
//             (each plane's sum is an exact int32; S_b is formed exactly in int64, then rounded once
//              to float, round to nearest even)
//       acc = fma(fl(d · dx[b]), float(S_b), acc)
//       q4_K / q5_K: acc = fma(-fl(dmin · dx[b]), float(M_b), acc),  M_b = sum_j m_j · sum_{e in j} q_e
//   Y[t][r] = acc
// Integer sums are exact, so any SIMD grouping gives the same S_b, M_b; the float operations are the
// same in every path, in block order: decode and prefill (and every ISA) give the same bits.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#define KVSTASH_INT8_DOT_NAMESPACE int8_scalar
#include "backends/cpu/matmul/matmul_int8_dot.h"

namespace kvstash::kernels::reference {

void matmul_int8_rows_scalar(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    for (int64_t r = row_begin; r < row_end; ++r) {
        const uint8_t* w = a.W + static_cast<uint64_t>(r) * a.row_bytes;
        for (int64_t t = 0; t < a.n_tokens; ++t) a.Y[t * a.y_stride + r] = int8_scalar::dot_int8(a.type, w, *a.xq, t);
    }
}

}  // namespace kvstash::kernels::reference
