// The AVX-512 attention of one query row for the heads that share one KV head (grouped-query
// attention), computing for every (query, head) exactly the arithmetic sequence of the per-row
// operations in attention_rows.h on the AVX-512 path (kernels/attention.cpp, attend_one), so that it is
// bitwise the same as that path, only faster:
//   - each key row is read once for all the heads of the group (scores and values alike);
//   - the 16-lane dot products of 16 keys are summed horizontally together, with the same pairing of
//     lanes as _mm512_reduce_add_ps (distance 8, 4, 2, 1), instead of one reduction per key;
//   - the weighted sum of values stays in registers across keys (same fma per key, in key order);
//   - key rows are walked block by block, with no division or indirect call per key.
#pragma once

#include <cstdint>

#include "format/tensor_type.h"

namespace kvstash::kernels {

struct AttentionGroupArgs {
    const float* q = nullptr;  // n_heads query rows of head_dim floats, consecutive (already rotated)
    float* out = nullptr;      // n_heads output rows, same layout
    int64_t n_heads = 0;       // heads of the group handled here (>= 1)
    int64_t head_dim = 0;
    int64_t n_keys = 0;  // keys 0..n_keys-1 (>= 1)
    float scale = 1.0f;
    // Key j's K row for this KV head: k_blocks[j / block_tokens] + (j % block_tokens) * row_bytes + offset.
    const uint8_t* const* k_blocks = nullptr;
    const uint8_t* const* v_blocks = nullptr;
    uint64_t offset = 0;
    int64_t block_tokens = 0;
    uint64_t row_bytes = 0;
    TensorType type = TensorType::F16;  // F16 or F32
    float* scores = nullptr;            // scratch: n_heads * n_keys floats
};

// Whether attention_group_avx512 handles a head size (a multiple of 16, at most 128).
inline bool attention_group_avx512_supports(int64_t head_dim) {
    return head_dim > 0 && head_dim % 16 == 0 && head_dim <= 128;
}
// Only on a CPU with AVX-512 (kernels/dispatch.h), for a supported head size.
void attention_group_avx512(const AttentionGroupArgs& args);

}  // namespace kvstash::kernels
