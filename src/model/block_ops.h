// The pieces of a transformer layer that differ between families by data, not by code: the norm kind
// (RMSNorm or LayerNorm with bias), optional biases after a projection, the FFN kind (SwiGLU or GELU) and
// learned position embeddings. Each works row by row (or elementwise), so it is batch-invariant.
#pragma once

#include <cstdint>
#include <vector>

#include "model/adapter_apply.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvstash {

class ThreadPool;

// y (n_tokens × w.rows) = x (n_tokens × w.cols) · wᵀ.
void project(const MatrixRef& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// The projections that read the same input rows x (same column count) run as one thread-pool run with
// x quantized once: Q, K and V from the attention input.
void project_qkv(const MatrixRef& wq, float* q, const MatrixRef& wk, float* k, const MatrixRef& wv, float* v,
                 const float* x, int64_t n_tokens, ThreadPool& pool);

// out (n_rows × n_embd) = the config's norm of each row of x, with weight and (LayerNorm) bias.
void norm_rows(const ModelConfig& c, const float* x, const std::vector<float>& weight, const std::vector<float>& bias,
               float* out, int64_t n_rows);

// RMSNorm in place of each of n_vectors consecutive vectors of weight.size() floats (gemma3's per-head
// q/k norms; the same weights for every head); nothing when weight is empty.
void head_norm_rows(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_vectors);

// The norm of each of n_rows rows of x in place (gemma3's post-attention / post-FFN norm, before the
// residual add); nothing when weight is empty.
void post_norm_rows(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_rows);

// y[r][i] += bias[i] for each of n_rows rows of bias.size() floats; nothing when bias is empty.
void add_bias_rows(float* y, const std::vector<float>& bias, int64_t n_rows);

// Scratch of the feed-forward block: gate and up, (n_tokens × n_ff) each.
struct FfnScratch {
    float* gate = nullptr;
    float* up = nullptr;
};

// out (n_tokens × n_embd) = the layer's feed-forward block of the normalised rows xn, with its biases;
// `lora` adds the rows' LoRA terms after each projection (before its bias).
void feed_forward(const ModelConfig& c, const LayerWeights& l, const float* xn, int64_t n_tokens, FfnScratch s,
                  float* out, ThreadPool& pool, const LoraHook& lora = {});

// x (n_embd floats) += position_embd row `pos`, decoded into tmp (n_embd floats). Throws
// Error(out_of_range) when the model has no row for pos (pos >= n_ctx_train): learned positions end at
// the table.
void add_position_embedding(const ModelConfig& c, const ModelWeights& w, int64_t pos, float* x, float* tmp);

// Throws Error(out_of_range) when a learned-position model is asked for positions [first, first + count)
// beyond its table; nothing for other models.
void check_positions(const ModelConfig& c, int64_t first, int64_t count);

}  // namespace kvstash
