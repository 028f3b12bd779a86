// What the attention op (Backend::attention) knows of one segment of a micro-batch: its rows and the
// cache they attend over (continuous batching: each row over its own sequence's KV).
#pragma once

#include <cstdint>

namespace kvstash {

class KvCache;

// `n_rows` consecutive rows of the micro-batch, at absolute positions first_pos.. of `kv` (whose K/V for
// [0, first_pos + n_rows) are already stored).
struct AttentionSegment {
    KvCache* kv = nullptr;
    int64_t first_pos = 0;
    int64_t n_rows = 0;
};

}  // namespace kvstash
