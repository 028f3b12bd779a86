// Causal attention of a micro-batch whose rows belong to several sequences, each row attending over
// its own sequence's KV cache (continuous batching), in one thread-pool run per layer.
//
// Built on the attention kernel (kernels/attention.h), called for one (row, head) at a time through a
// one-head view of the cache: the per-(query, head) computation is the kernel's own, so every output is
// bitwise what attention() over that sequence alone gives, whatever the other rows and threads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/attention.h"

namespace kvstash {

class KvCache;
class ThreadPool;

// `n_rows` consecutive rows of the micro-batch, at absolute positions first_pos.. of `kv` (whose K/V for
// [0, first_pos + n_rows) are already stored).
struct AttentionSegment {
    KvCache* kv = nullptr;
    int64_t first_pos = 0;
    int64_t n_rows = 0;
};

// Reused across calls; sized by the largest micro-batch and caches seen.
struct SegmentAttentionScratch {
    std::vector<int64_t> row_pos;      // (rows) absolute position of each row
    std::vector<int64_t> row_segment;  // (rows) segment index of each row
    // Block pointer tables of one layer, per (segment, kv head): entry [table_offset[s] + kv_head *
    // table_blocks[s] + b] points at block b's K (or V) rows of that layer, advanced to the head's slice.
    std::vector<const uint8_t*> k_heads;
    std::vector<const uint8_t*> v_heads;
    std::vector<KvLayerView> views;     // (segments) each cache's full-row view of the layer
    std::vector<size_t> table_offset;   // (segments)
    std::vector<int64_t> table_blocks;  // (segments)
};

// q:   rows × (n_head * head_dim) f32, rotated; rows = sum of n_rows, in segment order.
// out: rows × (n_head * head_dim) f32.
void segment_attention(const AttentionShape& shape, std::span<const AttentionSegment> segments, int64_t layer,
                       const float* q, float* out, SegmentAttentionScratch& scratch, ThreadPool& pool);

}  // namespace kvstash
