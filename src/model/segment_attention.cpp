#include "model/segment_attention.h"

#include "kernels/dispatch.h"
#include "kernels/thread_pool.h"
#include "state/kv_cache.h"

namespace kvstash {

void segment_attention(const AttentionShape& shape, std::span<const AttentionSegment> segments, int64_t layer,
                       const float* q, float* out, SegmentAttentionScratch& s, ThreadPool& pool) {
    const Isa isa = active_isa();  // once, outside the workers (it may throw on a bad KVSTASH_ISA)

    s.row_pos.clear();
    s.row_segment.clear();
    s.k_heads.clear();
    s.v_heads.clear();
    s.views.clear();
    s.table_offset.clear();
    s.table_blocks.clear();
    for (size_t seg = 0; seg < segments.size(); ++seg) {
        const AttentionSegment& a = segments[seg];
        for (int64_t t = 0; t < a.n_rows; ++t) {
            s.row_pos.push_back(a.first_pos + t);
            s.row_segment.push_back(static_cast<int64_t>(seg));
        }
        // One table per kv head: the kernel, given a one-head shape, reads the key of position j at
        // k_blocks[j / block_tokens] + (j % block_tokens) * row_bytes, i.e. at the head's slice when each
        // block pointer is advanced by the head's offset in the row, exactly the bytes it reads for that
        // head in a full-shape call.
        const KvLayerView view = a.kv->layer_view(layer);
        // Only the blocks holding positions [0, first_pos + n_rows) are read.
        const int64_t n_blocks = (a.first_pos + a.n_rows + view.block_tokens - 1) / view.block_tokens;
        const uint64_t elem_bytes = view.type == TensorType::F16 ? 2 : 4;
        s.views.push_back(view);
        s.table_offset.push_back(s.k_heads.size());
        s.table_blocks.push_back(n_blocks);
        for (int64_t h = 0; h < shape.n_head_kv; ++h) {
            const uint64_t head_offset = static_cast<uint64_t>(h * shape.head_dim) * elem_bytes;
            for (int64_t b = 0; b < n_blocks; ++b) {
                s.k_heads.push_back(view.k_blocks[b] + head_offset);
                s.v_heads.push_back(view.v_blocks[b] + head_offset);
            }
        }
    }

    AttentionShape one_head = shape;
    one_head.n_head = 1;
    one_head.n_head_kv = 1;
    const int64_t q_width = shape.n_head * shape.head_dim;
    const int64_t group = shape.n_head / shape.n_head_kv;
    const auto n_rows = static_cast<int64_t>(s.row_pos.size());
    // One task per (row, head), as attention() splits its work: the same balance for one long prompt
    // and for many single-token decode rows.
    pool.run(n_rows * shape.n_head, [&](int64_t task) {
        const int64_t row = task / shape.n_head;
        const int64_t head = task % shape.n_head;
        const auto seg = static_cast<size_t>(s.row_segment[static_cast<size_t>(row)]);
        const size_t table = s.table_offset[seg] + static_cast<size_t>((head / group) * s.table_blocks[seg]);
        KvLayerView view = s.views[seg];
        view.k_blocks = s.k_heads.data() + table;
        view.v_blocks = s.v_heads.data() + table;
        const int64_t offset = row * q_width + head * shape.head_dim;
        attention_with(isa, one_head, view, q + offset, 1, s.row_pos[static_cast<size_t>(row)], out + offset, nullptr);
    });
}

}  // namespace kvstash
