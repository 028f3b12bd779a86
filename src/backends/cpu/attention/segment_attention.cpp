#include "backends/cpu/attention/segment_attention.h"

#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
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

    // The kernel splits the rows' work over heads (and over key chunks for few rows); each row's output
    // is what attention() over its own cache gives, whatever the other rows and threads.
    const AttentionRows rows{static_cast<int64_t>(s.row_pos.size()), s.views.data(), s.row_segment.data(),
                             s.row_pos.data()};
    attention_rows_with(isa, shape, rows, q, out, &pool);
}

}  // namespace kvstash
