// Causal grouped-query attention of a batch of queries over a block-structured KV cache.
//
// Query t sits at absolute position first_pos + t and attends to keys 0..first_pos + t (the last
// `window` of them with a sliding window: a function of the position alone). The keys are taken in
// chunks of kAttentionChunkKeys aligned to absolute positions (chunk c = keys [256c, 256c + 255], cut to
// the query's range). For each (query, head) and chunk, the scores, the chunk's max, the softmax
// numerators, their sum and the numerator-weighted sum of values run over the chunk's keys in ascending
// order (a partial); the partials are then combined in chunk order (backends/cpu/attention/attention.cpp,
// combine_partials). Every step depends only on the query's absolute position, never on which other
// queries share the batch, how the chunks were spread over threads, or how many threads ran: the output
// is bitwise the same however the queries are batched and whichever threads compute it. K/V are read in
// their stored type (f16, f32, or q8_0 dequantized on read as d * q, exact in f32:
// backends/cpu/attention/attention_rows.h; q8_0 needs head_dim a multiple of 32). A single-chunk query (position < 256)
// gets exactly the plain one-pass softmax (the combination multiplies by exp(0) == 1).
#pragma once

#include <cstdint>

#include "backends/cpu/runtime/dispatch.h"
#include "format/tensor_type.h"

namespace kvstash {

class ThreadPool;

// One layer's view of the cache: position j's key row (n_head_kv * head_dim elements of `type`) is at
// k_blocks[j / block_tokens] + (j % block_tokens) * row_bytes; the same for values.
struct KvLayerView {
    TensorType type = TensorType::F16;  // F16, F32 or Q8_0
    int64_t block_tokens = 0;
    uint64_t row_bytes = 0;
    const uint8_t* const* k_blocks = nullptr;
    const uint8_t* const* v_blocks = nullptr;
};

// Keys per chunk; chunks start at multiples of it (absolute positions). A multiple of the KV block size.
inline constexpr int64_t kAttentionChunkKeys = 256;

struct AttentionShape {
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    float scale = 1.0f;  // 1/sqrt(head_dim) for Llama
    // Sliding window (gemma3's local layers): the query at position p attends to keys
    // max(0, p - window + 1)..p only. 0: no window (keys 0..p).
    int64_t window = 0;
};

// q:   n_tokens × (n_head * head_dim) f32, already rotated.
// out: n_tokens × (n_head * head_dim) f32.
// Uses the process's instruction set (backends/cpu/runtime/dispatch.h); attention_with picks one explicitly.
void attention(const AttentionShape& shape, const KvLayerView& kv, const float* q, int64_t n_tokens, int64_t first_pos,
               float* out, ThreadPool* pool);
void attention_with(Isa isa, const AttentionShape& shape, const KvLayerView& kv, const float* q, int64_t n_tokens,
                    int64_t first_pos, float* out, ThreadPool* pool);

// Rows of a micro-batch that may belong to several caches (continuous batching): row r sits at absolute
// position row_pos[r] of views[row_view[r]] (whose K/V for positions 0..row_pos[r] are stored).
struct AttentionRows {
    int64_t n_rows = 0;
    const KvLayerView* views = nullptr;
    const int64_t* row_view = nullptr;  // (n_rows)
    const int64_t* row_pos = nullptr;   // (n_rows)
};

// q / out: n_rows × (n_head * head_dim) f32, as attention_with. Each row's output is bitwise what
// attention_with gives that row over its own cache alone. With few rows (decode) the work is split over
// key chunks as well as heads, so that every thread has work at long context.
void attention_rows_with(Isa isa, const AttentionShape& shape, const AttentionRows& rows, const float* q, float* out,
                         ThreadPool* pool);

// Heads [h_begin, h_end) of one query row at absolute position `pos` (keys 0..pos), which must all read
// the same KV head. q_row / out_row: the row's whole n_head * head_dim vectors. Each head's output is
// bitwise what attention_with gives it, whatever range it is computed in.
void attention_row_heads(Isa isa, const AttentionShape& shape, const KvLayerView& kv, const float* q_row, int64_t pos,
                         int64_t h_begin, int64_t h_end, float* out_row);

// The definition the fast paths are tested against (bitwise): every (query, head) and chunk computed on its
// own with the per-row operations of `isa` (backends/cpu/attention/attention_rows.h), serially, then combined.
void attention_per_row_with(Isa isa, const AttentionShape& shape, const KvLayerView& kv, const float* q,
                            int64_t n_tokens, int64_t first_pos, float* out);

}  // namespace kvstash
