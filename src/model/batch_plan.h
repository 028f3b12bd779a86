// How the evaluator cuts a batch of requests into micro-batches (forward passes of bounded size).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvstash {

// Tokens [offset, offset + count) of request `request`, evaluated in one micro-batch.
struct PlannedSegment {
    size_t request = 0;
    int64_t offset = 0;
    int64_t count = 0;
};

using MicroBatch = std::vector<PlannedSegment>;

// sizes[i] = number of tokens of request i (0: the request takes no part). Requests are taken in
// order and each micro-batch is filled up to max_rows rows before the next one starts; a request that
// does not fit in what is left continues in the following micro-batch(es), so its segments come in
// position order, one per micro-batch. Every micro-batch but the last holds exactly max_rows rows:
// ceil(sum(sizes) / max_rows) forward passes in all. Throws Error(internal) if max_rows < 1.
std::vector<MicroBatch> plan_micro_batches(std::span<const int64_t> sizes, int64_t max_rows);

}  // namespace kvstash
