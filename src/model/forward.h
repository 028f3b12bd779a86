// The forward pass over a micro-batch of rows drawn from one or more sequences, each on top of its own
// KV cache (attention layers) and recurrent state (Mamba layers): Llama-family transformers, Mamba-1,
// Mamba-2 and granitehybrid models; qwen2 and gpt2 by the data-driven pieces of the config. Written once
// over the ops of model/backend.h: which device runs it is the backend's business.
#pragma once

#include <span>
#include <vector>

#include "model/backend.h"
#include "model/forward_segment.h"
#include "model/model_access.h"

namespace kvstash {

// The host-side bookkeeping of one micro-batch (which rows belong to which segment, under which
// adapters, the logits of several destinations before they are scattered); reused across calls by one
// evaluator. The activations themselves are the backend's.
struct ForwardBookkeeping {
    std::vector<AttentionSegment> attention_segments;  // (segments)
    std::vector<AdapterRows> adapter_rows;             // (segments) empty when no segment has adapters
    std::vector<AdapterRows> adapter_output_rows;      // (segments) the rows that get logits, packed
    std::vector<float> logits;                         // (rows with logits, n_vocab) several destinations only
};

// Evaluates the rows of all segments together (rows concatenated in segment order, a micro-batch the
// caller bounds): every weight matrix is read once for all rows; norms, RoPE (at each row's own
// position) and attention (over each row's own sequence) are per row. Appends each segment's K/V to its
// cache and advances its recurrent state. Each output is bitwise what a one-segment call on that
// sequence alone gives (batch-invariant ops). Segments of one call must not share a KvCache or a
// RecurrentState. `backend` must have been bound to `model` (Backend::bind_model).
void model_forward(const ModelImpl& model, std::span<const ForwardSegment> segments, Backend& backend,
                   ForwardBookkeeping& book);

}  // namespace kvstash
