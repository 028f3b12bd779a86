// One key chunk of attention for the heads that share one KV head (grouped-query attention), one query
// row: the chunk's partial softmax (backends/cpu/attention/attention.h) computed with exactly the arithmetic sequence
// of the per-row operations in attention_rows.h on the same ISA (backends/cpu/attention/attention.cpp,
// chunk_partial_rows), so that it is bitwise the same as that path, only faster:
//   - each key row is read (and converted from f16) once for all the heads of the group, scores and
//     values alike;
//   - the lane-wise dot products of several keys are summed horizontally together, with the same pairing
//     of lanes as the per-row dot's reduction, instead of one reduction per key; or, with many heads, 16 heads'
//     dot products lie in the lanes of a vector, and the reduction and the softmax are lane-wise;
//   - the weighted sum of values stays in registers across keys (same fma per key, in key order);
//   - key rows are walked block by block, with no division or indirect call per key.
#pragma once

#include <cstdint>

#include "format/tensor_type.h"

namespace kvstash::kernels {

struct AttentionGroupArgs {
    const float* q = nullptr;  // n_heads query rows of head_dim floats, consecutive (already rotated)
    int64_t n_heads = 0;       // heads of the group handled here (>= 1)
    int64_t head_dim = 0;
    int64_t first_key = 0;  // absolute position of the chunk's first key
    int64_t n_keys = 0;     // keys first_key..first_key + n_keys - 1 (1..kAttentionChunkKeys)
    float scale = 1.0f;
    // Per head, the keys it sees: head h the first head_keys[h] (1..n_keys) of the chunk's keys; nullptr: all
    // n_keys. (The rows of a chunk's diagonal share one call: row i sees one key more than row i - 1.) Keys up to
    // n_keys must be stored whichever head sees them.
    const int64_t* head_keys = nullptr;
    // Per head, the first key it sees: head h keys head_first[h]..keys - 1 of the chunk (indices from first_key, below
    // its key count); nullptr: from the chunk's first. (Rows whose sliding windows start inside the chunk share one
    // call.) Only attention_group_avx2 takes it; keys from the chunk's first to its last must be stored.
    const int64_t* head_first = nullptr;
    // Key j's K row for this KV head: k_blocks[j / block_tokens] + (j % block_tokens) * row_bytes + offset.
    const uint8_t* const* k_blocks = nullptr;
    const uint8_t* const* v_blocks = nullptr;
    uint64_t offset = 0;
    int64_t block_tokens = 0;
    uint64_t row_bytes = 0;
    TensorType type = TensorType::F16;  // F16, F32 or Q8_0 (attention_group_avx2 only; offset on a block boundary)
    float* scores = nullptr;            // scratch: n_heads * n_keys floats
    // The partial of each head h: max_score[h], sum[h] (of the numerators, in key order) and
    // acc[h * head_dim ..] (the numerator-weighted sum of values, not normalised).
    float* max_score = nullptr;
    float* sum = nullptr;
    float* acc = nullptr;
};

// Whether attention_group_avx2 handles a head size (a multiple of 8, at most 512).
inline bool attention_group_avx2_supports(int64_t head_dim) {
    return head_dim > 0 && head_dim % 8 == 0 && head_dim <= 512;
}
// Only on a CPU with AVX2+FMA+F16C, for a supported head size.
void attention_group_avx2(const AttentionGroupArgs& args);

// Whether attention_group_avx512 handles a head size (a multiple of 16, at most 128).
inline bool attention_group_avx512_supports(int64_t head_dim) {
    return head_dim > 0 && head_dim % 16 == 0 && head_dim <= 128;
}
// Only on a CPU with AVX-512 (backends/cpu/runtime/dispatch.h), for a supported head size.
void attention_group_avx512(const AttentionGroupArgs& args);

}  // namespace kvstash::kernels
