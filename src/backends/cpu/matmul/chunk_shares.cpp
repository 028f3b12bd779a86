#include "backends/cpu/matmul/chunk_shares.h"

#include <string>

#include "kvstash/error.h"

namespace kvstash::kernels {
namespace {
constexpr uint64_t pack(uint64_t front, uint64_t back) { return (back << 32) | front; }
constexpr uint64_t front_of(uint64_t range) { return range & 0xFFFFFFFFu; }
constexpr uint64_t back_of(uint64_t range) { return range >> 32; }
}  // namespace

void ChunkShares::reset(std::span<const int64_t> bounds) {
    const auto n = static_cast<int>(bounds.size()) - 1;
    if (n < 1 || bounds.front() < 0 || bounds.back() >= (int64_t{1} << 32)) {
        throw Error(ErrorCode::internal, "ChunkShares: bad bounds (" + std::to_string(bounds.size()) + " of them)");
    }
    if (n > capacity_) {
        slots_ = std::make_unique<Slot[]>(static_cast<size_t>(n));
        bounds_ = std::make_unique<int64_t[]>(static_cast<size_t>(n) + 1);
        capacity_ = n;
    }
    n_shares_ = n;
    for (int s = 0; s <= n; ++s) {
        if (s > 0 && bounds[static_cast<size_t>(s)] < bounds[static_cast<size_t>(s) - 1]) {
            throw Error(ErrorCode::internal, "ChunkShares: bounds must not decrease");
        }
        bounds_[static_cast<size_t>(s)] = bounds[static_cast<size_t>(s)];
    }
    // Relaxed: the thread-pool run that follows publishes these stores to its workers.
    for (int s = 0; s < n; ++s) {
        slots_[static_cast<size_t>(s)].range.store(pack(static_cast<uint64_t>(first(s)), static_cast<uint64_t>(end(s))),
                                                   std::memory_order_relaxed);
    }
}

// Relaxed atomics: a claim needs only atomicity (the chunk's outputs are published by the end of the
// thread-pool run, not by the claim).
int64_t ChunkShares::take_front(int s, int64_t* range_end) {
    std::atomic<uint64_t>& range = slots_[static_cast<size_t>(s)].range;
    uint64_t v = range.load(std::memory_order_relaxed);
    for (;;) {
        const uint64_t front = front_of(v), back = back_of(v);
        if (front >= back) return -1;
        if (range.compare_exchange_weak(v, pack(front + 1, back), std::memory_order_relaxed)) {
            *range_end = static_cast<int64_t>(back);
            return static_cast<int64_t>(front);
        }
    }
}

bool ChunkShares::steal_half(int s) {
    for (;;) {
        int victim = -1;
        uint64_t most = 0, seen = 0;
        for (int k = 1; k < n_shares_; ++k) {
            const int other = (s + k) % n_shares_;
            const uint64_t v = slots_[static_cast<size_t>(other)].range.load(std::memory_order_relaxed);
            const uint64_t left = front_of(v) < back_of(v) ? back_of(v) - front_of(v) : 0;
            if (left > most) {
                most = left;
                victim = other;
                seen = v;
            }
        }
        if (victim < 0) return false;
        const uint64_t front = front_of(seen), back = back_of(seen);
        const uint64_t mid = front + (back - front) / 2;  // the victim keeps [front, mid), the thief [mid, back)
        if (slots_[static_cast<size_t>(victim)].range.compare_exchange_strong(seen, pack(front, mid),
                                                                              std::memory_order_relaxed)) {
            slots_[static_cast<size_t>(s)].range.store(pack(mid, back), std::memory_order_relaxed);
            return true;
        }
        // The victim's range moved meanwhile: look again.
    }
}

}  // namespace kvstash::kernels
