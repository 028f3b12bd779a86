// PrefixIndex alone (no model): chained blocks found by key, parent and tokens; the best partial block;
// key collisions never share; least-recently-used eviction of unreferenced leaves; bytes accounting.
#include "engine/prefix_cache_index.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "kvstash/error.h"

namespace kvstash {
namespace {

constexpr size_t kHalf = 100;  // bytes of K (and of V) per block: what the index counts, not what it reads
constexpr BlockKey kRoot{7, 7};

std::shared_ptr<KvBlock> make_block(size_t k_bytes = kHalf, size_t v_bytes = kHalf) {
    auto block = std::make_shared<KvBlock>();
    block->k = KvBlockBuffer(k_bytes);
    block->v = KvBlockBuffer(v_bytes);
    return block;
}

// A sequence of n_blocks full blocks: tokens start at `first` and count up; keys are made up (the index
// does not compute keys), distinct per (tag, block).
struct Sequence {
    std::vector<int32_t> tokens;
    std::vector<BlockKey> keys;
    std::vector<std::shared_ptr<KvBlock>> blocks;
    Sequence(uint64_t tag, int n_blocks, int32_t first = 0) : tokens(static_cast<size_t>(n_blocks) * kv_block_tokens) {
        std::iota(tokens.begin(), tokens.end(), first);
        for (int i = 0; i < n_blocks; ++i) {
            keys.push_back(BlockKey{tag, static_cast<uint64_t>(i)});
            blocks.push_back(make_block());
        }
    }
    uint64_t insert_into(PrefixIndex& index) const { return index.insert(kRoot, keys, tokens, blocks); }
    PrefixIndex::Match lookup_in(PrefixIndex& index, int64_t limit) const {
        const std::span<const BlockKey> all(keys);
        return index.lookup(kRoot, all.first(static_cast<size_t>(limit / kv_block_tokens)), tokens, limit);
    }
};

TEST(PrefixIndex, FindsChainedBlocksUpToTheLimit) {
    PrefixIndex index;
    const Sequence s(1, 3);
    EXPECT_EQ(s.insert_into(index), 3u);
    EXPECT_EQ(index.blocks(), 3u);
    EXPECT_EQ(index.bytes(), 3 * 2 * kHalf);

    PrefixIndex::Match m = s.lookup_in(index, 96);
    EXPECT_EQ(m.n_tokens, 96);
    EXPECT_FALSE(m.partial_block);
    EXPECT_EQ(m.blocks, s.blocks);

    m = s.lookup_in(index, 64);  // exactly two blocks: nothing partial
    EXPECT_EQ(m.n_tokens, 64);
    EXPECT_EQ(m.blocks.size(), 2u);

    m = s.lookup_in(index, 70);  // two blocks and the first 6 tokens of the third
    EXPECT_EQ(m.n_tokens, 70);
    EXPECT_TRUE(m.partial_block);
    ASSERT_EQ(m.blocks.size(), 3u);
    EXPECT_EQ(m.blocks[2], s.blocks[2]);

    EXPECT_EQ(s.insert_into(index), 0u) << "already there";
    EXPECT_EQ(index.blocks(), 3u);
}

TEST(PrefixIndex, AnotherRootOrParentIsAMiss) {
    PrefixIndex index;
    const Sequence s(1, 2);
    s.insert_into(index);
    EXPECT_EQ(index.lookup(BlockKey{8, 8}, s.keys, s.tokens, 64).n_tokens, 0);
    // The second key alone, as if it were a first block: its parent is not the root.
    const std::vector<BlockKey> second_only = {s.keys[1]};
    const std::vector<int32_t> second_tokens(s.tokens.begin() + kv_block_tokens, s.tokens.end());
    const PrefixIndex::Match m = index.lookup(kRoot, second_only, second_tokens, 32);
    EXPECT_EQ(m.n_tokens, 0);
    EXPECT_TRUE(m.blocks.empty());
}

TEST(PrefixIndex, PartialMatchTakesTheChildSharingTheMostTokens) {
    PrefixIndex index;
    Sequence a(1, 2);
    a.insert_into(index);
    Sequence b(2, 2);  // same first block (key and tokens), second block differs from token 20 on
    b.keys[0] = a.keys[0];
    b.blocks[0] = a.blocks[0];
    for (size_t i = 32 + 20; i < 64; ++i) b.tokens[i] = -1;
    EXPECT_EQ(b.insert_into(index), 1u);

    Sequence request(3, 2);  // a's first block; its second block shares 25 tokens with b's, 20 with a's
    request.keys[0] = a.keys[0];
    for (size_t i = 32 + 20; i < 32 + 25; ++i) request.tokens[i] = -1;
    const PrefixIndex::Match m = request.lookup_in(index, 64);
    EXPECT_EQ(m.n_tokens, 32 + 25);
    EXPECT_TRUE(m.partial_block);
    ASSERT_EQ(m.blocks.size(), 2u);
    EXPECT_EQ(m.blocks[0], a.blocks[0]);
    EXPECT_EQ(m.blocks[1], b.blocks[1]);
}

// A key that collides (same key, other tokens) never shares its block, and insert keeps what is there.
TEST(PrefixIndex, TokensAreCheckedUnderEveryKey) {
    PrefixIndex index;
    const Sequence s(1, 2);
    s.insert_into(index);
    Sequence collision = s;     // same keys
    collision.tokens[32] = -5;  // first token of the second block differs
    collision.blocks = {make_block(), make_block()};
    const PrefixIndex::Match m = collision.lookup_in(index, 64);
    EXPECT_EQ(m.n_tokens, 32);
    ASSERT_EQ(m.blocks.size(), 1u);
    EXPECT_EQ(m.blocks[0], s.blocks[0]);

    collision.tokens[32] = 32;
    collision.tokens[63] = -5;  // last token differs: a partial match of 31 tokens, not a full one
    const PrefixIndex::Match partial = collision.lookup_in(index, 64);
    EXPECT_EQ(partial.n_tokens, 63);
    EXPECT_TRUE(partial.partial_block);

    EXPECT_EQ(collision.insert_into(index), 0u);
    EXPECT_EQ(s.lookup_in(index, 64).blocks, s.blocks) << "the colliding insert replaced nothing";
}

TEST(PrefixIndex, InsertAdoptsTheCallersCopyOnlyWhenNobodyUsesTheIndexOne) {
    PrefixIndex index;
    Sequence s(1, 1);
    s.insert_into(index);
    std::shared_ptr<KvBlock> held = s.blocks[0];  // a live State uses the index's copy
    s.blocks = {make_block()};                    // the caller's identical block
    s.insert_into(index);
    EXPECT_EQ(s.lookup_in(index, 32).blocks[0], held);

    const std::weak_ptr<KvBlock> old = held;
    held.reset();  // now only the index holds its copy
    s.insert_into(index);
    EXPECT_EQ(s.lookup_in(index, 32).blocks[0], s.blocks[0]);
    EXPECT_TRUE(old.expired());
}

TEST(PrefixIndex, EvictsLeastRecentlyUsedUnreferencedLeaves) {
    PrefixIndex index;
    Sequence a(1, 2), b(2, 2, 1000);
    a.insert_into(index);
    b.insert_into(index);
    a.blocks.clear();  // only the index holds them now
    b.blocks.clear();
    EXPECT_EQ(index.bytes_in_use(), 0u);
    a.lookup_in(index, 64);  // a is now the most recently used
    EXPECT_EQ(index.evict_to(3 * 2 * kHalf), 1u);
    EXPECT_EQ(index.blocks(), 3u);
    EXPECT_EQ(index.bytes(), 3 * 2 * kHalf);
    EXPECT_EQ(a.lookup_in(index, 64).n_tokens, 64);
    EXPECT_EQ(b.lookup_in(index, 64).n_tokens, 32);  // b's leaf went, not a's
    // Now b is the most recently used: a's leaf goes next.
    EXPECT_EQ(index.evict_to(2 * 2 * kHalf), 1u);
    EXPECT_EQ(a.lookup_in(index, 64).n_tokens, 32);
    EXPECT_EQ(b.lookup_in(index, 64).n_tokens, 32);
}

// The parent is used before its child, so it is less recent; eviction still takes the leaf.
TEST(PrefixIndex, EvictsLeavesBeforeTheirParents) {
    PrefixIndex index;
    Sequence s(1, 3);
    s.insert_into(index);
    s.blocks.clear();
    EXPECT_EQ(index.evict_to(2 * 2 * kHalf), 1u);
    EXPECT_EQ(s.lookup_in(index, 96).n_tokens, 64);
    EXPECT_EQ(index.evict_to(0), 2u);
    EXPECT_EQ(index.blocks(), 0u);
    EXPECT_EQ(index.bytes(), 0u);
}

TEST(PrefixIndex, ReferencedBlocksAndTheirAncestorsAreNeverEvicted) {
    PrefixIndex index;
    Sequence pinned(1, 3), other(2, 2, 1000);
    pinned.insert_into(index);
    other.insert_into(index);
    const std::shared_ptr<KvBlock> in_use = pinned.blocks[1];  // a live State holds the middle block
    pinned.blocks.clear();
    other.blocks.clear();
    EXPECT_EQ(index.bytes_in_use(), 2 * 2 * kHalf);  // the block and its parent
    EXPECT_EQ(index.evict_to(0), 3u);                // pinned's leaf and both of other's
    EXPECT_EQ(index.blocks(), 2u);
    EXPECT_EQ(index.bytes(), 2 * 2 * kHalf);
    EXPECT_EQ(pinned.lookup_in(index, 96).n_tokens, 64);
    EXPECT_EQ(pinned.lookup_in(index, 96).blocks[1], in_use);
}

TEST(PrefixIndex, BytesCountEachBlocksKAndV) {
    PrefixIndex index;
    Sequence s(1, 2);
    s.blocks[1] = make_block(40, 60);
    s.insert_into(index);
    EXPECT_EQ(index.bytes(), 2 * kHalf + 40 + 60);
    s.blocks.clear();
    index.evict_to(2 * kHalf);
    EXPECT_EQ(index.bytes(), 2 * kHalf);
}

TEST(PrefixIndex, MismatchedArgumentsAreInternalErrors) {
    PrefixIndex index;
    const Sequence s(1, 2);
    try {
        index.insert(kRoot, s.keys, std::span<const int32_t>(s.tokens).first(40), s.blocks);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::internal);
    }
    EXPECT_THROW(index.lookup(kRoot, s.keys, s.tokens, 32), Error);  // two keys for one block's worth
    EXPECT_THROW(index.lookup(kRoot, {}, s.tokens, 65), Error);      // more than the tokens
}

}  // namespace
}  // namespace kvstash

namespace kvstash {
namespace {

// Recurrent checkpoints as leaves of the block forest: found at the largest position the request's
// matched blocks reach (their partial tokens checked, a collision never matches), their partial tokens
// extend the match (`reach`), a missing parent refuses them, a block with checkpoints is not a leaf, and a
// checkpoint a live State shares is not evicted.
TEST(PrefixIndexCheckpoints, FoundByPositionKeptWhileSharedAndEvictedBeforeTheirParents) {
    PrefixIndex index;
    Sequence s(1, 3);  // tokens 0..95
    s.insert_into(index);
    s.blocks.clear();  // only the index holds them now
    const RecurrentShape shape{1, 2, 3};
    const std::span<const int32_t> tokens(s.tokens);
    // At 40 (block 1 + 8 tokens, with a tail block) and at 64 (no tail).
    EXPECT_TRUE(index.insert_checkpoint(s.keys[0], BlockKey{9, 40}, tokens.subspan(32, 8), RecurrentState(shape),
                                        make_block(), kRoot));
    EXPECT_TRUE(index.insert_checkpoint(s.keys[1], BlockKey{9, 64}, tokens.subspan(64, 0), RecurrentState(shape),
                                        nullptr, kRoot));
    EXPECT_FALSE(index.insert_checkpoint(BlockKey{5, 5}, BlockKey{9, 1}, tokens.subspan(64, 1), RecurrentState(shape),
                                         make_block(), kRoot))
        << "a checkpoint whose parent block is not cached could never be found";
    EXPECT_EQ(index.checkpoints(), 2u);
    const uint64_t each = 5 * sizeof(float);  // 1 layer × (2 conv + 3 scan) floats
    EXPECT_EQ(index.checkpoint_bytes(), 2 * each + 2 * kHalf);

    const std::span<const BlockKey> keys(s.keys);
    EXPECT_EQ(index.lookup_checkpoint(kRoot, keys.first(2), tokens, 95).pos, 64);
    EXPECT_EQ(index.lookup_checkpoint(kRoot, keys.first(2), tokens, 63).pos, 40);
    EXPECT_EQ(index.lookup_checkpoint(kRoot, keys.first(1), tokens, 95).pos, 40);
    EXPECT_EQ(index.lookup_checkpoint(kRoot, keys.first(0), tokens, 95).pos, 0);
    // Another request whose block-1 tokens differ at 36: no checkpoint at 40, but the match reaches 36.
    std::vector<int32_t> other = s.tokens;
    other[36] = -1;
    const PrefixIndex::CheckpointMatch m = index.lookup_checkpoint(kRoot, keys.first(1), other, 95);
    EXPECT_EQ(m.pos, 0);
    EXPECT_EQ(m.reach, 36);

    // Held by a "State": kept; the blocks they hang off are not leaves.
    PrefixIndex::CheckpointMatch held = index.lookup_checkpoint(kRoot, keys.first(2), tokens, 95);
    EXPECT_EQ(index.bytes_in_use(), each + 2 * 2 * kHalf);  // the checkpoint and the blocks before it
    index.evict_to(0);
    EXPECT_EQ(index.checkpoints(), 1u);  // the one at 40 went, the one at 64 is shared
    EXPECT_EQ(index.blocks(), 2u);       // block 2 went; blocks 0 and 1 carry the checkpoint at 64
    held = {};
    index.evict_to(0);
    EXPECT_EQ(index.checkpoints(), 0u);
    EXPECT_EQ(index.blocks(), 0u);
    EXPECT_EQ(index.bytes(), 0u);
    EXPECT_EQ(index.checkpoint_bytes(), 0u);
}

}  // namespace
}  // namespace kvstash
