// ChunkShares (backends/cpu/matmul/chunk_shares.h): every chunk is handed out exactly once, an owner takes its share
// front to back, back halves of the other shares are stolen when its own is done, and a thread that never gets going
// has its share done by the others.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cpu/matmul/chunk_shares.h"
#include "backends/cpu/runtime/thread_pool.h"

namespace kvstash {
namespace {

using kernels::ChunkShares;

// One thread alone: its own share front to back, then back halves of what is left elsewhere, fullest first.
TEST(ChunkShares, OwnShareThenBackHalvesOfTheOthers) {
    ChunkShares shares;
    const std::vector<int64_t> bounds = {0, 5, 5, 12};  // the middle share is empty
    shares.reset(bounds);
    ASSERT_EQ(shares.n_shares(), 3);
    EXPECT_EQ(shares.first(2), 5);
    EXPECT_EQ(shares.end(2), 12);
    std::vector<std::pair<int64_t, int64_t>> seen;  // (chunk, end of the range held)
    shares.run_share(0, [&](int64_t c, int64_t range_end) { seen.emplace_back(c, range_end); });
    // Share 2 holds 5..11: the thief takes 8..11 (the back half, rounded up), then 6..7, then 5.
    const std::vector<std::pair<int64_t, int64_t>> want = {{0, 5},  {1, 5},   {2, 5},   {3, 5}, {4, 5}, {8, 12},
                                                           {9, 12}, {10, 12}, {11, 12}, {6, 8}, {7, 8}, {5, 6}};
    EXPECT_EQ(seen, want);
    int64_t range_end = 0;
    for (int s = 0; s < 3; ++s) EXPECT_EQ(shares.take_front(s, &range_end), -1) << s;
    EXPECT_FALSE(shares.steal_half(1));
}

// An owner taking from the front while a thief steals halves: every chunk once, the owner's in order.
TEST(ChunkShares, OwnerAndThiefMeetWithoutOverlap) {
    ChunkShares shares;
    for (int64_t n : {1, 2, 7, 10, 33}) {
        const std::vector<int64_t> bounds = {3, 3 + n, 3 + n};
        shares.reset(bounds);
        std::vector<int64_t> taken;
        // One chunk for `who`, stealing when its share is empty; false when nothing is left anywhere.
        auto step = [&](int who) {
            int64_t range_end = 0;
            int64_t c = shares.take_front(who, &range_end);
            if (c < 0 && shares.steal_half(who)) c = shares.take_front(who, &range_end);
            if (c < 0) return false;
            EXPECT_LT(c, range_end);
            taken.push_back(c);
            return true;
        };
        for (bool any = true; any;) {
            const bool owner = step(0);
            const bool thief = step(1);
            any = owner || thief;
        }
        std::sort(taken.begin(), taken.end());
        ASSERT_EQ(static_cast<int64_t>(taken.size()), n);
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(taken[static_cast<size_t>(i)], 3 + i);
    }
}

TEST(ChunkShares, EveryChunkOnceOverThreadsAndOwnChunksInOrder) {
    for (int n_threads : {2, 3, 4}) {
        ThreadPool pool(n_threads);
        ChunkShares shares;
        for (int64_t n_chunks : {1, 2, 3, 17, 1000}) {
            std::vector<int64_t> bounds;
            for (int s = 0; s <= n_threads; ++s) bounds.push_back(n_chunks * s / n_threads);
            for (int repeat = 0; repeat < 20; ++repeat) {
                shares.reset(bounds);
                std::vector<std::atomic<int>> count(static_cast<size_t>(n_chunks));
                std::atomic<bool> in_order{true};
                pool.run(n_threads, [&](int64_t s) {
                    // Within one held range the chunks come in order (a new range starts after a steal).
                    int64_t last = -1, last_end = -1;
                    shares.run_share(static_cast<int>(s), [&](int64_t c, int64_t range_end) {
                        count[static_cast<size_t>(c)].fetch_add(1);
                        if (c >= range_end || range_end > n_chunks) in_order = false;
                        if (range_end == last_end && c != last + 1) in_order = false;
                        last = c;
                        last_end = range_end;
                    });
                });
                for (int64_t c = 0; c < n_chunks; ++c) {
                    ASSERT_EQ(count[static_cast<size_t>(c)].load(), 1)
                        << n_threads << " threads, chunk " << c << " of " << n_chunks;
                }
                ASSERT_TRUE(in_order.load()) << n_threads << " threads, " << n_chunks << " chunks";
            }
        }
    }
}

// Share 1's task starts only after share 0's task has returned: share 0's thread must have done everything.
TEST(ChunkShares, ASlowThreadsShareIsDoneByTheOthers) {
    ThreadPool pool(2);
    ChunkShares shares;
    const std::vector<int64_t> bounds = {0, 40, 100};
    shares.reset(bounds);
    std::atomic<bool> first_done{false};
    std::mutex mutex;
    std::vector<std::pair<int64_t, int64_t>> done;  // (share task, chunk)
    pool.run(2, [&](int64_t s) {
        if (s == 1) {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (!first_done.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        }
        shares.run_share(static_cast<int>(s), [&](int64_t c, int64_t) {
            std::lock_guard<std::mutex> lock(mutex);
            done.emplace_back(s, c);
        });
        if (s == 0) first_done = true;
    });
    ASSERT_EQ(done.size(), 100u);
    for (const auto& [task, chunk] : done) EXPECT_EQ(task, 0) << "chunk " << chunk;
}

}  // namespace
}  // namespace kvstash
