// Scalar reference matmul with f32 activations: decode each W row with the reference dequantizer, then the
// canonical f32 dot product per (row, token). It doubles as the "scalar" ISA of the dispatcher, and defines
// the bits that the AVX2 and AVX-512 kernels give (docs/architecture/canonical-matmul.md):
//   acc[0..15] = +0; for k0 = 0, 16, 32, ...: for i = 0..15: acc[i] = fma(w[k0+i], x[k0+i], acc[i])
//     (one rounding; past cols, w = x = 0: acc[i] + 0, which turns a -0 lane into +0, as a masked vector
//     load of zeros does);
//   s8[i] = acc[i] + acc[i+8] (i < 8); s4[i] = s8[i] + s8[i+4] (i < 4); y = (s4[0] + s4[2]) + (s4[1] + s4[3]).
// The tree is simd::reduce_add's (backends/cpu/simd/f32x16.h), which the vector paths end each dot product with.
#pragma GCC optimize("fp-contract=off")  // no contraction besides the explicit fma

#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "kvstash/error.h"

namespace kvstash {

namespace kernels::reference {

namespace {

float canonical_dot(const float* w, const float* x, int64_t cols) {
    constexpr int64_t kLanes = 16;
    float acc[kLanes] = {};
    int64_t k0 = 0;
    for (; k0 + kLanes <= cols; k0 += kLanes) {
        for (int64_t i = 0; i < kLanes; ++i) acc[i] = std::fma(w[k0 + i], x[k0 + i], acc[i]);
    }
    if (k0 < cols) {
        for (int64_t i = 0; i < kLanes; ++i)
            acc[i] = k0 + i < cols ? std::fma(w[k0 + i], x[k0 + i], acc[i]) : acc[i] + 0.0f;
    }
    float s8[8], s4[4];
    for (int i = 0; i < 8; ++i) s8[i] = acc[i] + acc[i + 8];
    for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

}  // namespace

void matmul_rows_scalar(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    std::vector<float> w(static_cast<size_t>(a.cols));
    for (int64_t r = row_begin; r < row_end; ++r) {
        dequantize_row(a.type, a.W + static_cast<uint64_t>(r) * a.row_bytes, w.data(), a.cols);
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            a.Y[t * a.y_stride + r] = canonical_dot(w.data(), a.X + t * a.cols, a.cols);
        }
    }
}

}  // namespace kernels::reference

namespace reference {

void matmul(TensorType type, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tokens, float* Y) {
    if (rows < 0 || cols < 0 || n_tokens < 0) {
        throw Error(ErrorCode::invalid_argument, "reference::matmul: negative size (rows " + std::to_string(rows) +
                                                     ", cols " + std::to_string(cols) + ", tokens " +
                                                     std::to_string(n_tokens) + ")");
    }
    const kernels::MatmulArgs args{
        type, static_cast<const uint8_t*>(W), tensor_row_bytes(type, cols), cols, X, n_tokens, Y, rows};
    kernels::reference::matmul_rows_scalar(args, 0, rows);
}

}  // namespace reference

}  // namespace kvstash
