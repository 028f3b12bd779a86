#include "backends/cpu/matmul/project.h"

#include "backends/cpu/matmul/matmul.h"

namespace kvstash {

void project(const MatrixRef& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
    matmul(w.type, w.data, w.rows, w.cols, x, n_tokens, y, &pool, w.tiles);
}

void project_qkv(const MatrixRef& wq, float* q, const MatrixRef& wk, float* k, const MatrixRef& wv, float* v,
                 const float* x, int64_t n_tokens, ThreadPool& pool) {
    const MatmulOperand ops[] = {{wq.type, wq.data, wq.rows, q, wq.tiles},
                                 {wk.type, wk.data, wk.rows, k, wk.tiles},
                                 {wv.type, wv.data, wv.rows, v, wv.tiles}};
    matmul_shared_input(ops, wq.cols, x, n_tokens, &pool);
}

void add_bias_rows(float* y, const std::vector<float>& bias, int64_t n_rows) {
    const auto width = static_cast<int64_t>(bias.size());
    for (int64_t t = 0; t < n_rows; ++t) {
        float* row = y + t * width;
        for (int64_t i = 0; i < width; ++i) row[i] += bias[static_cast<size_t>(i)];
    }
}

}  // namespace kvstash
