// Work in chunks 0 .. n_chunks - 1, cut into one contiguous share per thread; each thread takes its own share's
// chunks front to back, and when it has none left it moves the back half of another share's remaining chunks
// into its own (work stealing by halves) and goes on.
//
// Why (decode, backends/cpu/matmul/matmul.cpp): a one-token product reads every weight once from memory and is bound by
// that. A thread that walks one contiguous range keeps its software prefetch running from chunk to chunk (the
// kernels may prefetch up to the end of the range it holds) and touches its own counter only. Stealing whole
// back halves keeps a slow or descheduled thread from holding up the run (it ends within about one chunk of
// balanced) while the thief still streams a contiguous range, away from the lines the owner has just
// prefetched; a log number of steals, not one per chunk. Which thread runs a chunk never changes a result
// (backends/cpu/runtime/thread_pool.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

namespace kvstash::kernels {

class ChunkShares {
public:
    // Share s = chunks [bounds[s], bounds[s + 1]); bounds non-decreasing, bounds.size() - 1 shares, chunk
    // indices below 2^32. Not thread-safe: call between runs.
    void reset(std::span<const int64_t> bounds);

    int n_shares() const { return n_shares_; }
    int64_t first(int s) const { return bounds_[static_cast<size_t>(s)]; }
    int64_t end(int s) const { return bounds_[static_cast<size_t>(s) + 1]; }

    // For share s's owner only: its next chunk from the front, and the end of the range it holds then
    // (later chunks of it may still be stolen); -1 when the share is empty.
    int64_t take_front(int s, int64_t* range_end);
    // For share s's owner only, with its share empty: moves the back half (rounded up) of the remaining
    // chunks of the fullest other share into share s. False when every other share is empty.
    bool steal_half(int s);

    // Thread-pool task `s` (< n_shares()): fn(chunk, range_end) for every chunk share s holds, front to back,
    // stealing back halves until every share is empty. Each chunk is handed out exactly once in all.
    template <class Fn>
    void run_share(int s, Fn&& fn) {
        do {
            int64_t range_end = 0;
            for (int64_t c; (c = take_front(s, &range_end)) >= 0;) fn(c, range_end);
        } while (steal_half(s));
    }

private:
    // Packed so that both ends move under one compare-and-swap: low 32 bits the front (the owner's next
    // chunk), high 32 bits the back (one past the last chunk not taken). Empty when front >= back; only the
    // owner writes an empty slot (a thief changes non-empty ones only), so its plain store is safe.
    struct alignas(64) Slot {
        std::atomic<uint64_t> range{0};
    };
    std::unique_ptr<Slot[]> slots_;
    std::unique_ptr<int64_t[]> bounds_;
    int n_shares_ = 0;
    int capacity_ = 0;
};

}  // namespace kvstash::kernels
