#include "kernels/attention.h"

#include <cmath>
#include <vector>

#include "kernels/attention_group.h"
#include "kernels/attention_rows.h"
#include "kernels/thread_pool.h"

namespace kvstash {
namespace {

inline const uint8_t* kv_row(const uint8_t* const* blocks, const KvLayerView& kv, int64_t pos) {
    return blocks[pos / kv.block_tokens] + static_cast<uint64_t>(pos % kv.block_tokens) * kv.row_bytes;
}

// The first key a query at `pos` attends to.
inline int64_t first_key(const AttentionShape& s, int64_t pos) {
    return s.window > 0 && pos >= s.window ? pos - s.window + 1 : 0;
}

// One (query, head): scores over keys first..last, softmax, weighted sum of values.
void attend_one(const kernels::AttentionRowOps& ops, const AttentionShape& s, const KvLayerView& kv, const float* q,
                int64_t last, int64_t kv_head, float* out, std::vector<float>& scores) {
    const int64_t first = first_key(s, last);
    const int64_t n_keys = last + 1 - first;
    scores.resize(static_cast<size_t>(n_keys));
    const uint64_t offset = static_cast<uint64_t>(kv_head * s.head_dim) * (kv.type == TensorType::F16 ? 2 : 4);
    float max_score = -INFINITY;
    for (int64_t j = 0; j < n_keys; ++j) {
        const float score = ops.dot(q, kv_row(kv.k_blocks, kv, first + j) + offset, s.head_dim, kv.type) * s.scale;
        scores[static_cast<size_t>(j)] = score;
        if (score > max_score) max_score = score;
    }
    // The numerators (vectorised, the same bits on every ISA), then their sum in key order.
    ops.exp_shifted(scores.data(), scores.data(), n_keys, max_score);
    float sum = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) sum += scores[static_cast<size_t>(j)];
    for (int64_t d = 0; d < s.head_dim; ++d) out[d] = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) {
        ops.axpy(out, scores[static_cast<size_t>(j)], kv_row(kv.v_blocks, kv, first + j) + offset, s.head_dim, kv.type);
    }
    const float inv_sum = 1.0f / sum;
    for (int64_t d = 0; d < s.head_dim; ++d) out[d] *= inv_sum;
}

}  // namespace

void attention(const AttentionShape& shape, const KvLayerView& kv, const float* q, int64_t n_tokens, int64_t first_pos,
               float* out, ThreadPool* pool) {
    attention_with(active_isa(), shape, kv, q, n_tokens, first_pos, out, pool);
}

void attention_row_heads(Isa isa, const AttentionShape& shape, const KvLayerView& kv, const float* q_row, int64_t pos,
                         int64_t h_begin, int64_t h_end, float* out_row) {
    thread_local std::vector<float> scratch;
    const int64_t group = shape.n_head / shape.n_head_kv;
    const int64_t kv_head = h_begin / group;
    const kernels::KernelTable& table = kernels::kernel_table(isa);
    // The grouped AVX-512 kernel starts at key 0: a row whose window has begun to slide takes the per-head
    // path, which gives the same bits.
    if (table.attention_group != nullptr && kernels::attention_group_avx512_supports(shape.head_dim) &&
        first_key(shape, pos) == 0) {
        const int64_t n_heads = h_end - h_begin;
        scratch.resize(static_cast<size_t>(n_heads * (pos + 1)));
        kernels::AttentionGroupArgs args;
        args.q = q_row + h_begin * shape.head_dim;
        args.out = out_row + h_begin * shape.head_dim;
        args.n_heads = n_heads;
        args.head_dim = shape.head_dim;
        args.n_keys = pos + 1;
        args.scale = shape.scale;
        args.k_blocks = kv.k_blocks;
        args.v_blocks = kv.v_blocks;
        args.offset = static_cast<uint64_t>(kv_head * shape.head_dim) * (kv.type == TensorType::F16 ? 2 : 4);
        args.block_tokens = kv.block_tokens;
        args.row_bytes = kv.row_bytes;
        args.type = kv.type;
        args.scores = scratch.data();
        table.attention_group(args);
        return;
    }
    const kernels::AttentionRowOps ops = kernels::attention_row_ops(isa);
    for (int64_t h = h_begin; h < h_end; ++h) {
        attend_one(ops, shape, kv, q_row + h * shape.head_dim, pos, h / group, out_row + h * shape.head_dim, scratch);
    }
}

void attention_per_row_with(Isa isa, const AttentionShape& shape, const KvLayerView& kv, const float* q,
                            int64_t n_tokens, int64_t first_pos, float* out) {
    const kernels::AttentionRowOps ops = kernels::attention_row_ops(isa);
    const int64_t q_width = shape.n_head * shape.head_dim;
    const int64_t group = shape.n_head / shape.n_head_kv;
    std::vector<float> scores;
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t h = 0; h < shape.n_head; ++h) {
            const int64_t offset = t * q_width + h * shape.head_dim;
            attend_one(ops, shape, kv, q + offset, first_pos + t, h / group, out + offset, scores);
        }
    }
}

int64_t attention_heads_per_task(const AttentionShape& shape, int64_t n_rows, int n_threads) {
    const int64_t group = shape.n_head / shape.n_head_kv;
    return n_rows * shape.n_head_kv >= 4 * static_cast<int64_t>(n_threads) ? group : 1;
}

void attention_with(Isa isa, const AttentionShape& shape, const KvLayerView& kv, const float* q, int64_t n_tokens,
                    int64_t first_pos, float* out, ThreadPool* pool) {
    const int64_t q_width = shape.n_head * shape.head_dim;
    const int64_t per_task = attention_heads_per_task(shape, n_tokens, pool ? pool->n_threads() : 1);
    const int64_t tasks_per_row = shape.n_head / per_task;
    auto task = [&](int64_t index) {
        const int64_t t = index / tasks_per_row;
        const int64_t h = (index % tasks_per_row) * per_task;
        attention_row_heads(isa, shape, kv, q + t * q_width, first_pos + t, h, h + per_task, out + t * q_width);
    };
    const int64_t n_tasks = n_tokens * tasks_per_row;
    if (pool) {
        pool->run(n_tasks, task);
    } else {
        for (int64_t i = 0; i < n_tasks; ++i) task(i);
    }
}

}  // namespace kvstash
