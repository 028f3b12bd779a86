// The Llama-family forward pass over a micro-batch of tokens on top of a KV cache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/model.h"

namespace kvstash {

class KvCache;
class ThreadPool;

// Activation buffers for micro-batches of up to max_tokens tokens; owned by one evaluator.
struct LlamaScratch {
    int64_t max_tokens = 0;
    std::vector<float> x;         // (max_tokens, n_embd)   residual stream
    std::vector<float> xn;        // (max_tokens, n_embd)   normalised input of a sub-layer
    std::vector<float> q;         // (max_tokens, n_head * head_dim)
    std::vector<float> k;         // (max_tokens, n_head_kv * head_dim)
    std::vector<float> v;         // (max_tokens, n_head_kv * head_dim)
    std::vector<float> attn;      // (max_tokens, n_head * head_dim)
    std::vector<float> proj;      // (max_tokens, n_embd)   output of attn_output / ffn_down
    std::vector<float> gate;      // (max_tokens, n_ff)
    std::vector<float> up;        // (max_tokens, n_ff)
    std::vector<float> rope_cos;  // (max_tokens, n_rot / 2)
    std::vector<float> rope_sin;  // (max_tokens, n_rot / 2)

    void reserve(const ModelConfig& config, int64_t n_tokens);
};

// Evaluates tokens at positions kv.n_tokens().. and appends their K/V to `kv` (which must already
// have grown to hold them: positions [first_pos, first_pos + tokens.size())). Writes logits of the
// micro-batch rows selected by `logits_from` (rows logits_from..N-1) into `logits` ((N - logits_from) × n_vocab).
void llama_forward(const Model::Impl& model, KvCache& kv, int64_t first_pos, std::span<const int32_t> tokens,
                   LlamaScratch& scratch, ThreadPool& pool, int64_t logits_from, float* logits);

}  // namespace kvstash
