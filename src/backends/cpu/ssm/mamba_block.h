// The CPU's SSM op (Backend::ssm_block): the Mamba mixer of one recurrent layer (Mamba-1 or Mamba-2, as
// llama.cpp's build_mamba_layer / build_mamba2_layer and transformers' MambaMixer / Mamba2Mixer compute
// it) over a micro-batch: the projections over all rows at once, then the causal convolution and the
// selective scan per sequence, each over its own recurrent state, token after token
// (backends/cpu/ssm/ssm.h), so that a row's output is the same bits however the rows were batched or
// chunked.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/forward_segment.h"
#include "model/model_access.h"

namespace kvstash {

class ThreadPool;

// Activation buffers for up to max_tokens rows; sized for the model on first use.
struct MambaScratch {
    int64_t max_tokens = 0;
    std::vector<float> proj;   // (max_tokens, d_in_proj): ssm_in's output
    std::vector<float> conv;   // (max_tokens, conv_channels): after convolution and SiLU
    std::vector<float> xdb;    // Mamba-1: (max_tokens, dt_rank + 2 d_state): ssm_x's output
    std::vector<float> dt_in;  // Mamba-1: (max_tokens, dt_rank): its dt part, contiguous
    std::vector<float> dt;     // (max_tokens, n_head): time steps with bias
    std::vector<float> y;      // (max_tokens, d_inner): scan output, then gated
    std::vector<float> yn;     // Mamba-2: (max_tokens, d_inner): after the grouped RMS norm

    void reserve(const SsmConfig& ssm, int64_t n_tokens);
};

// Rows of all segments (concatenated in segment order): xn (n × n_embd) the normalised input, out
// (n × n_embd) the block's output. Advances each segment's recurrent state (slot `slot` of it) and
// fills its snapshots' layer `slot`.
void mamba_block(const ModelImpl& model, int64_t layer, std::span<const ForwardSegment> segments, const float* xn,
                 float* out, MambaScratch& scratch, ThreadPool& pool);

}  // namespace kvstash
