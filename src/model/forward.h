// The forward pass over a micro-batch of rows drawn from one or more sequences, each on top of its own
// KV cache (attention layers) and recurrent state (Mamba layers): Llama-family transformers, Mamba-1,
// Mamba-2 and granitehybrid models; qwen2 and gpt2 by the data-driven pieces of model/block_ops.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/model.h"
#include "model/adapter_apply.h"
#include "model/forward_segment.h"
#include "model/mamba_block.h"
#include "model/model_access.h"
#include "model/segment_attention.h"

namespace kvstash {

class KvCache;
class ThreadPool;

// Activation buffers for micro-batches of up to max_tokens rows; owned by one evaluator.
struct ForwardScratch {
    int64_t max_tokens = 0;
    std::vector<float> x;             // (max_tokens, n_embd)   residual stream
    std::vector<float> xn;            // (max_tokens, n_embd)   normalised input of a sub-layer
    std::vector<float> q;             // (max_tokens, n_head * head_dim)
    std::vector<float> k;             // (max_tokens, n_head_kv * head_dim)
    std::vector<float> v;             // (max_tokens, n_head_kv * head_dim)
    std::vector<float> attn;          // (max_tokens, n_head * head_dim)
    std::vector<float> proj;          // (max_tokens, n_embd)   output of attn_output / ffn_down
    std::vector<float> gate;          // (max_tokens, n_ff)
    std::vector<float> up;            // (max_tokens, n_ff)
    std::vector<float> rope_cos;      // (max_tokens, n_rot / 2)
    std::vector<float> rope_sin;      // (max_tokens, n_rot / 2)
    std::vector<float> rope_cos_swa;  // (max_tokens, n_rot / 2) sliding-window layers' angles, if any
    std::vector<float> rope_sin_swa;  // (max_tokens, n_rot / 2)
    // (rows with logits, n_vocab): only when logits go to more than one segment (batched calls); one
    // segment's logits are written straight to its destination.
    std::vector<float> logits;
    std::vector<AttentionSegment> attention_segments;  // (segments of the current micro-batch)
    SegmentAttentionScratch attention;
    MambaScratch mamba;
    // Adapters (model/adapter_apply.h): each segment's rows, and each segment's logits rows; empty when
    // no segment of the micro-batch has adapters.
    std::vector<AdapterRows> adapter_rows;
    std::vector<AdapterRows> adapter_output_rows;
    LoraScratch lora;

    void reserve(const ModelConfig& config, int64_t n_tokens);
};

// Evaluates the rows of all segments together (rows concatenated in segment order, at most
// scratch-sized micro-batches: the caller bounds the total): every weight matrix is read once for all
// rows; norms, RoPE (at each row's own position) and attention (over each row's own sequence) are per
// row. Appends each segment's K/V to its cache and advances its recurrent state. Each output is
// bitwise what a one-segment call on that sequence alone gives (batch-invariant kernels). Segments of
// one call must not share a KvCache or a RecurrentState.
void model_forward(const ModelImpl& model, std::span<const ForwardSegment> segments, ForwardScratch& scratch,
                   ThreadPool& pool);

}  // namespace kvstash
