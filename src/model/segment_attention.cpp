#include "model/segment_attention.h"

#include "kernels/dispatch.h"
#include "kernels/thread_pool.h"
#include "kv/kv_cache.h"

namespace kvstash {

void segment_attention(const AttentionShape& shape, std::span<const AttentionSegment> segments, int64_t layer,
                       const float* q, float* out, SegmentAttentionScratch& s, ThreadPool& pool) {
    const Isa isa = active_isa();  // once, outside the workers (it may throw on a bad KVSTASH_ISA)

    s.row_pos.clear();
    s.row_segment.clear();
    s.views.clear();
    for (size_t seg = 0; seg < segments.size(); ++seg) {
        const AttentionSegment& a = segments[seg];
        for (int64_t t = 0; t < a.n_rows; ++t) {
            s.row_pos.push_back(a.first_pos + t);
            s.row_segment.push_back(static_cast<int64_t>(seg));
        }
        s.views.push_back(a.kv->layer_view(layer));
    }

    const int64_t q_width = shape.n_head * shape.head_dim;
    const auto n_rows = static_cast<int64_t>(s.row_pos.size());
    // Tasks of (row, heads) as attention() splits its work: the same balance for one long prompt and
    // for many single-token decode rows. Each head's output does not depend on the split.
    const int64_t per_task = attention_heads_per_task(shape, n_rows, pool.n_threads());
    const int64_t tasks_per_row = shape.n_head / per_task;
    pool.run(n_rows * tasks_per_row, [&](int64_t task) {
        const int64_t row = task / tasks_per_row;
        const int64_t head = (task % tasks_per_row) * per_task;
        const auto seg = static_cast<size_t>(s.row_segment[static_cast<size_t>(row)]);
        attention_row_heads(isa, shape, s.views[seg], q + row * q_width, s.row_pos[static_cast<size_t>(row)], head,
                            head + per_task, out + row * q_width);
    });
}

}  // namespace kvstash
