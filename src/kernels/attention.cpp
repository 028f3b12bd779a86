#include "kernels/attention.h"

#include <cmath>
#include <vector>

#include "kernels/attention_rows.h"
#include "kernels/thread_pool.h"

namespace kvstash {
namespace {

inline const uint8_t* kv_row(const uint8_t* const* blocks, const KvLayerView& kv, int64_t pos) {
    return blocks[pos / kv.block_tokens] + static_cast<uint64_t>(pos % kv.block_tokens) * kv.row_bytes;
}

// One (query, head): scores over keys 0..last, softmax, weighted sum of values.
void attend_one(const kernels::AttentionRowOps& ops, const AttentionShape& s, const KvLayerView& kv, const float* q,
                int64_t last, int64_t kv_head, float* out, std::vector<float>& scores) {
    const int64_t n_keys = last + 1;
    scores.resize(static_cast<size_t>(n_keys));
    const uint64_t offset = static_cast<uint64_t>(kv_head * s.head_dim) * (kv.type == TensorType::F16 ? 2 : 4);
    float max_score = -INFINITY;
    for (int64_t j = 0; j < n_keys; ++j) {
        const float score = ops.dot(q, kv_row(kv.k_blocks, kv, j) + offset, s.head_dim, kv.type) * s.scale;
        scores[static_cast<size_t>(j)] = score;
        if (score > max_score) max_score = score;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) {
        const float e = std::exp(scores[static_cast<size_t>(j)] - max_score);
        scores[static_cast<size_t>(j)] = e;
        sum += e;
    }
    for (int64_t d = 0; d < s.head_dim; ++d) out[d] = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) {
        ops.axpy(out, scores[static_cast<size_t>(j)], kv_row(kv.v_blocks, kv, j) + offset, s.head_dim, kv.type);
    }
    const float inv_sum = 1.0f / sum;
    for (int64_t d = 0; d < s.head_dim; ++d) out[d] *= inv_sum;
}

}  // namespace

void attention(const AttentionShape& shape, const KvLayerView& kv, const float* q, int64_t n_tokens,
               int64_t first_pos, float* out, ThreadPool* pool) {
    attention_with(active_isa(), shape, kv, q, n_tokens, first_pos, out, pool);
}

void attention_with(Isa isa, const AttentionShape& shape, const KvLayerView& kv, const float* q, int64_t n_tokens,
                    int64_t first_pos, float* out, ThreadPool* pool) {
    const kernels::AttentionRowOps ops = kernels::attention_row_ops(isa);
    const int64_t q_width = shape.n_head * shape.head_dim;
    const int64_t group = shape.n_head / shape.n_head_kv;
    auto task = [&](int64_t index) {
        thread_local std::vector<float> scores;
        const int64_t t = index / shape.n_head;
        const int64_t h = index % shape.n_head;
        attend_one(ops, shape, kv, q + t * q_width + h * shape.head_dim, first_pos + t, h / group,
                   out + t * q_width + h * shape.head_dim, scores);
    };
    const int64_t n_tasks = n_tokens * shape.n_head;
    if (pool) {
        pool->run(n_tasks, task);
    } else {
        for (int64_t i = 0; i < n_tasks; ++i) task(i);
    }
}

}  // namespace kvstash
