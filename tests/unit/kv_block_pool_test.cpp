// KvBlockPool and KvBlockBuffer: chunk geometry, reuse of released blocks (no new chunk mapped), the
// retained limit returning memory, concurrent allocate/release from several threads, and the
// std::vector-like members of KvBlockBuffer (copy copies bytes, resize zero-fills like a vector).
// The pool is process-wide: every test uses block sizes no other test in this binary uses, and checks
// differences of the counters rather than absolute values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "kv/kv_block_buffer.h"
#include "kv/kv_block_pool.h"

namespace kvstash {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(KvBlockPool, GeometryOfSmolLM2HalvesAndOfSmallAndLargeBlocks) {
    // SmolLM2-135M f16: 30 layers x 32 tokens x 192 x 2 B = 368,640 B per half; 11 fit in 4 MiB (3% unused),
    // 5 in 2 MiB would leave 12% unused.
    const KvBlockPool::Geometry smol = KvBlockPool::geometry(368640);
    EXPECT_TRUE(smol.huge);
    EXPECT_EQ(smol.chunk_bytes, 4 * kMiB);
    EXPECT_EQ(smol.slots, 11u);

    // Tiny test models: 16 blocks per chunk of plain pages.
    const KvBlockPool::Geometry tiny = KvBlockPool::geometry(2048);
    EXPECT_FALSE(tiny.huge);
    EXPECT_EQ(tiny.slots, 16u);
    EXPECT_EQ(tiny.chunk_bytes, 16u * 2048);

    // A block larger than a huge page: whole huge pages, at least one block, little waste.
    for (const size_t bytes : {2 * kMiB, 8 * kMiB + 64, 3 * kMiB + 4096, 40 * kMiB}) {
        const KvBlockPool::Geometry g = KvBlockPool::geometry(bytes);
        EXPECT_TRUE(g.huge) << bytes;
        EXPECT_EQ(g.chunk_bytes % (2 * kMiB), 0u) << bytes;
        EXPECT_GE(g.slots, 1u) << bytes;
        EXPECT_GE(g.chunk_bytes, g.slots * bytes) << bytes;
        EXPECT_LE(g.chunk_bytes - g.slots * bytes, g.chunk_bytes / 16 + 2 * kMiB) << bytes;
    }
}

TEST(KvBlockPool, ReleasedBlocksAreReusedWithoutMappingMore) {
    KvBlockPool& pool = KvBlockPool::instance();
    const size_t bytes = 368640 + 64;  // this test's own size class
    std::vector<uint8_t*> first;
    for (int i = 0; i < 25; ++i) {
        uint8_t* p = pool.allocate(bytes);
        std::memset(p, i, bytes);  // the whole block is writable
        first.push_back(p);
    }
    // No two blocks overlap.
    std::vector<uint8_t*> sorted = first;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 1; i < sorted.size(); ++i) EXPECT_GE(sorted[i] - sorted[i - 1], static_cast<std::ptrdiff_t>(bytes));
    for (int i = 0; i < 25; ++i) EXPECT_EQ(first[static_cast<size_t>(i)][bytes - 1], static_cast<uint8_t>(i));

    const KvBlockPool::Stats before = pool.stats();
    for (uint8_t* p : first) pool.release(p, bytes);
    std::set<uint8_t*> again;
    for (int i = 0; i < 25; ++i) again.insert(pool.allocate(bytes));
    const KvBlockPool::Stats after = pool.stats();
    EXPECT_EQ(after.chunks_mapped_total, before.chunks_mapped_total) << "reuse must not map new chunks";
    EXPECT_EQ(again, std::set<uint8_t*>(first.begin(), first.end()));
    EXPECT_EQ(after.live_bytes, before.live_bytes);
    for (uint8_t* p : again) pool.release(p, bytes);
}

TEST(KvBlockPool, RetainedLimitReturnsEmptyChunks) {
    KvBlockPool& pool = KvBlockPool::instance();
    const uint64_t limit = pool.retained_limit();
    const size_t bytes = 3 * kMiB + 128;  // one block per huge chunk: each release empties a chunk
    const KvBlockPool::Stats start = pool.stats();
    std::vector<uint8_t*> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(pool.allocate(bytes));
    const KvBlockPool::Stats held = pool.stats();
    EXPECT_GE(held.mapped_bytes, start.mapped_bytes + 4 * bytes);
    EXPECT_EQ(held.live_bytes, start.live_bytes + 4 * bytes);

    pool.set_retained_limit(0);
    for (uint8_t* p : blocks) pool.release(p, bytes);
    const KvBlockPool::Stats released = pool.stats();
    pool.set_retained_limit(limit);
    EXPECT_EQ(released.live_bytes, start.live_bytes);
    EXPECT_EQ(released.free_bytes, 0u) << "with a limit of 0 every empty chunk is unmapped";
    EXPECT_LE(released.mapped_bytes, start.mapped_bytes);
    EXPECT_EQ(pool.retained_limit(), limit);
}

TEST(KvBlockPool, ConcurrentAllocateAndReleaseKeepBlocksApart) {
    KvBlockPool& pool = KvBlockPool::instance();
    const size_t bytes = 4096 + 192;
    const uint64_t live_before = pool.stats().live_bytes;
    std::vector<std::thread> threads;
    std::vector<int> errors(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            std::vector<uint8_t*> mine;
            for (int round = 0; round < 300; ++round) {
                uint8_t* p = pool.allocate(bytes);
                std::memset(p, t + 1, bytes);
                mine.push_back(p);
                if (mine.size() > 8) {  // release the oldest after checking nobody else wrote into it
                    uint8_t* old = mine.front();
                    for (size_t i = 0; i < bytes; i += 97) errors[static_cast<size_t>(t)] += old[i] != t + 1;
                    pool.release(old, bytes);
                    mine.erase(mine.begin());
                }
            }
            for (uint8_t* p : mine) pool.release(p, bytes);
        });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(errors[static_cast<size_t>(t)], 0) << "thread " << t;
    EXPECT_EQ(pool.stats().live_bytes, live_before);
}

// Free blocks are poisoned for AddressSanitizer: a block read after its release (a dangling pointer into
// a KvCache block table, say) is reported although the memory stays mapped in the pool.
TEST(KvBlockPool, UseAfterReleaseIsCaughtUnderAsan) {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            KvBlockPool& pool = KvBlockPool::instance();
            uint8_t* p = pool.allocate(5000);
            pool.release(p, 5000);
            volatile uint8_t x = p[10];
            (void)x;
        },
        "use-after-poison");
#else
    GTEST_SKIP() << "needs AddressSanitizer (-DKVSTASH_SANITIZE=ON)";
#endif
}

TEST(KvBlockBuffer, BehavesLikeTheVectorItReplaces) {
    KvBlockBuffer empty;
    EXPECT_TRUE(empty.empty());
    EXPECT_EQ(empty.size(), 0u);
    EXPECT_EQ(empty.data(), nullptr);

    KvBlockBuffer a(1000);
    ASSERT_EQ(a.size(), 1000u);
    for (size_t i = 0; i < a.size(); ++i) a.data()[i] = static_cast<uint8_t>(i * 7);

    KvBlockBuffer copy(a);  // a copy owns new memory with the same bytes
    EXPECT_NE(copy.data(), a.data());
    EXPECT_EQ(std::memcmp(copy.data(), a.data(), 1000), 0);
    copy.data()[0] = 99;
    EXPECT_EQ(a.data()[0], 0);

    const uint8_t* where = a.data();
    KvBlockBuffer moved(std::move(a));  // a move hands the memory over
    EXPECT_EQ(moved.data(), where);
    EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): documented moved-from state

    moved.resize(1500);  // like std::vector: keeps the bytes, zero-fills the new ones
    ASSERT_EQ(moved.size(), 1500u);
    for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(moved.data()[i], static_cast<uint8_t>(i * 7)) << i;
    for (size_t i = 1000; i < 1500; ++i) ASSERT_EQ(moved.data()[i], 0) << i;
    moved.resize(10);
    EXPECT_EQ(moved.size(), 10u);
    EXPECT_EQ(moved.data()[9], static_cast<uint8_t>(63));
    EXPECT_EQ(std::distance(moved.begin(), moved.end()), 10);

    copy = moved;
    EXPECT_EQ(copy.size(), 10u);
    EXPECT_EQ(std::memcmp(copy.data(), moved.data(), 10), 0);
}

}  // namespace
}  // namespace kvstash
