// The CPU's attention op (Backend::attention): causal attention of a micro-batch whose rows belong to
// several sequences, each row attending over its own sequence's KV cache (continuous batching), in one
// thread-pool run per layer.
//
// Built on the attention kernel (backends/cpu/attention/attention.h), called for one row and a range of
// its heads at a time: the per-(query, head) computation is the kernel's own, so every output is bitwise
// what attention() over that sequence alone gives, whatever the other rows and threads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cpu/attention/attention.h"
#include "model/attention_segment.h"

namespace kvstash {

class ThreadPool;

// Reused across calls; sized by the largest micro-batch seen.
struct SegmentAttentionScratch {
    std::vector<int64_t> row_pos;      // (rows) absolute position of each row
    std::vector<int64_t> row_segment;  // (rows) segment index of each row
    std::vector<KvLayerView> views;    // (segments) each cache's view of the layer
};

// q:   rows × (n_head * head_dim) f32, rotated; rows = sum of n_rows, in segment order.
// out: rows × (n_head * head_dim) f32.
void segment_attention(const AttentionShape& shape, std::span<const AttentionSegment> segments, int64_t layer,
                       const float* q, float* out, SegmentAttentionScratch& scratch, ThreadPool& pool);

}  // namespace kvstash
