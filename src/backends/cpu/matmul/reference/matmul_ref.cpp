// Scalar reference matmul: decode each W row with the reference dequantizer, then one sequential f32
// sum per (row, token), k = 0, 1, ..., cols-1. It doubles as the "scalar" ISA of the dispatcher.
#pragma GCC optimize("fp-contract=off")  // keep w*x rounded before the add, as written

#include <string>
#include <vector>

#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "kvstash/error.h"

namespace kvstash {

namespace kernels::reference {

void matmul_rows_scalar(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    std::vector<float> w(static_cast<size_t>(a.cols));
    for (int64_t r = row_begin; r < row_end; ++r) {
        dequantize_row(a.type, a.W + static_cast<uint64_t>(r) * a.row_bytes, w.data(), a.cols);
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            const float* x = a.X + t * a.cols;
            float sum = 0.0f;
            for (int64_t k = 0; k < a.cols; ++k) sum += w[static_cast<size_t>(k)] * x[k];
            a.Y[t * a.y_stride + r] = sum;
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
