// The CPU's norm ops (Backend::norm, ::norm_in_place, ::head_norm): the model's norm kind (RMSNorm, or
// LayerNorm with bias: data of the config, not code of a family) on the row kernels of
// backends/cpu/norm/. Each row is normalised from itself alone: batch-invariant.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace kvstash {

// out (n_rows × n_embd) = the config's norm of each row of x, with weight and (LayerNorm) bias.
void norm_rows(const ModelConfig& c, const float* x, const std::vector<float>& weight, const std::vector<float>& bias,
               float* out, int64_t n_rows);

// RMSNorm in place of each of n_vectors consecutive vectors of weight.size() floats (gemma3's per-head
// q/k norms; the same weights for every head); nothing when weight is empty.
void head_norm_rows(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_vectors);

// The norm of each of n_rows rows of x in place (gemma3's post-attention / post-FFN norm, before the
// residual add); nothing when weight is empty.
void post_norm_rows(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_rows);

}  // namespace kvstash
