// The CPU's projection ops (Backend::project, ::project_qkv, ::add_bias): a model matrix (MatrixRef, in
// its own element type) times activation rows, on the matmul kernel (backends/cpu/matmul/matmul.h), and
// the optional bias after it. Row t of every output is a fixed function of row t of the input:
// batch-invariant.
#pragma once

#include <cstdint>
#include <vector>

#include "model/weights.h"

namespace kvstash {

class ThreadPool;

// y (n_tokens × w.rows) = x (n_tokens × w.cols) · wᵀ.
void project(const MatrixRef& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// The projections that read the same input rows x (same column count) run as one thread-pool run with
// x quantized once: Q, K and V from the attention input.
void project_qkv(const MatrixRef& wq, float* q, const MatrixRef& wk, float* k, const MatrixRef& wv, float* v,
                 const float* x, int64_t n_tokens, ThreadPool& pool);

// y[r][i] += bias[i] for each of n_rows rows of bias.size() floats; nothing when bias is empty.
void add_bias_rows(float* y, const std::vector<float>& bias, int64_t n_rows);

}  // namespace kvstash
