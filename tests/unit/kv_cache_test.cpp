// KvCache: sizes and block counts under grow/truncate; layer_view addresses the rows k_row/v_row wrote;
// fork shares blocks and copy-on-write keeps parent and fork apart, including after a truncate into a
// shared block. Blocks are recycled through KvBlockPool.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "format/tensor_type.h"
#include "kv/kv_block_pool.h"
#include "kv/kv_cache.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

constexpr int64_t kLayers = 3;
constexpr int64_t kWidth = 4;  // n_embd_kv
constexpr int64_t B = kv_block_tokens;

// A value unique to (tag, layer, position, K or V, element): tag tells apart what parent and fork wrote.
float marker(int tag, int64_t layer, int64_t pos, bool is_v, int64_t i) {
    return static_cast<float>(tag * 1000000 + layer * 100000 + pos * 100 + (is_v ? 50 : 0) + i);
}

void write_rows(KvCache& kv, int64_t from, int64_t to, int tag) {
    for (int64_t layer = 0; layer < kLayers; ++layer) {
        for (int64_t pos = from; pos < to; ++pos) {
            for (int64_t i = 0; i < kWidth; ++i) {
                const float kf = marker(tag, layer, pos, false, i), vf = marker(tag, layer, pos, true, i);
                std::memcpy(kv.k_row(layer, pos) + 4 * i, &kf, 4);
                std::memcpy(kv.v_row(layer, pos) + 4 * i, &vf, 4);
            }
        }
    }
}

// Reads positions [from, to) through layer_view (the attention kernel's path) and expects `tag`'s values.
void expect_rows(KvCache& kv, int64_t from, int64_t to, int tag, const char* who) {
    for (int64_t layer = 0; layer < kLayers; ++layer) {
        const KvLayerView view = kv.layer_view(layer);
        for (int64_t pos = from; pos < to; ++pos) {
            for (int64_t i = 0; i < kWidth; ++i) {
                float k, v;
                const uint64_t at = static_cast<uint64_t>(pos % view.block_tokens) * view.row_bytes + 4 * i;
                std::memcpy(&k, view.k_blocks[pos / view.block_tokens] + at, 4);
                std::memcpy(&v, view.v_blocks[pos / view.block_tokens] + at, 4);
                ASSERT_EQ(k, marker(tag, layer, pos, false, i)) << who << " K layer " << layer << " pos " << pos;
                ASSERT_EQ(v, marker(tag, layer, pos, true, i)) << who << " V layer " << layer << " pos " << pos;
            }
        }
    }
}

// One name per KV type, for every frontend; anything else is not a type.
TEST(KvType, NamesParseBackAndNothingElseParses) {
    for (KvType type : {KvType::f16, KvType::f32, KvType::q8_0}) EXPECT_EQ(parse_kv_type(kv_type_name(type)), type);
    EXPECT_EQ(kv_type_name(KvType::q8_0), "q8_0");
    for (const char* other : {"", "F16", "f16 ", "q8", "q4_0", "bf16"}) EXPECT_EQ(parse_kv_type(other), std::nullopt);
}

TEST(KvCache, RowBytesAndBlockBytes) {
    const KvCache f16(kLayers, kWidth, KvType::f16), f32(kLayers, kWidth, KvType::f32);
    EXPECT_EQ(f16.row_bytes(), 2u * kWidth);
    EXPECT_EQ(f32.row_bytes(), 4u * kWidth);
    EXPECT_EQ(f32.block_bytes(), 2u * kLayers * B * 4 * kWidth);
    EXPECT_EQ(f32.type(), TensorType::F32);
    EXPECT_EQ(f32.kv_type(), KvType::f32);
    EXPECT_EQ(f16.kv_type(), KvType::f16);
    EXPECT_EQ(f16.n_tokens(), 0);
    EXPECT_EQ(f16.n_blocks(), 0);
}

// q8_0 rows: 34 bytes per 32 values (ggml's block_q8_0); the State checks the head size (a multiple of 32).
TEST(KvCache, Q8_0RowsAreBlocksOf34Bytes) {
    const KvCache q8(kLayers, 64, KvType::q8_0);
    EXPECT_EQ(q8.row_bytes(), 2u * 34u);
    EXPECT_EQ(q8.block_bytes(), 2u * kLayers * B * 2 * 34);
    EXPECT_EQ(q8.type(), TensorType::Q8_0);
    EXPECT_EQ(q8.kv_type(), KvType::q8_0);
}

TEST(KvCache, GrowAndTruncateSizes) {
    KvCache kv(kLayers, kWidth, KvType::f32);
    struct Step {
        bool grow;
        int64_t n;
        int64_t blocks;
    };
    const Step steps[] = {{true, 0, 0},      {true, 1, 1},      {true, B, 1},          {true, B + 1, 2},
                          {true, 3 * B, 3},  {false, 3 * B, 3}, {false, 2 * B + 1, 3}, {false, 2 * B, 2},
                          {false, B - 1, 1}, {true, B - 1, 1},  {true, 5 * B + 3, 6},  {false, 0, 0},
                          {true, 2, 1}};
    for (const Step& s : steps) {
        if (s.grow)
            kv.grow(s.n);
        else
            kv.truncate(s.n);
        EXPECT_EQ(kv.n_tokens(), s.n) << (s.grow ? "grow " : "truncate ") << s.n;
        EXPECT_EQ(kv.n_blocks(), s.blocks) << (s.grow ? "grow " : "truncate ") << s.n;
    }
}

TEST(KvCache, InvalidSizesThrow) {
    KvCache kv(kLayers, kWidth, KvType::f32);
    kv.grow(10);
    EXPECT_THROW(kv.grow(5), Error);
    EXPECT_THROW(kv.truncate(11), Error);
    EXPECT_THROW(kv.truncate(-1), Error);
    EXPECT_EQ(kv.n_tokens(), 10);
    EXPECT_EQ(kv.n_blocks(), 1);
}

// Every position of every layer, K and V, lands in its own row: the view's block table and row stride
// address exactly what k_row/v_row returned, and no two rows overlap.
TEST(KvCache, LayerViewAddressesTheWrittenRows) {
    for (KvType kv_type : {KvType::f32, KvType::f16}) {
        KvCache kv(kLayers, kWidth, kv_type);
        const TensorType type = kv.type();
        kv.grow(2 * B + 5);
        for (int64_t layer = 0; layer < kLayers; ++layer) {
            const KvLayerView view = kv.layer_view(layer);
            EXPECT_EQ(view.type, type);
            EXPECT_EQ(view.block_tokens, B);
            EXPECT_EQ(view.row_bytes, kv.row_bytes());
            for (int64_t pos = 0; pos < kv.n_tokens(); ++pos) {
                const uint64_t at = static_cast<uint64_t>(pos % B) * view.row_bytes;
                EXPECT_EQ(view.k_blocks[pos / B] + at, kv.k_row(layer, pos)) << "layer " << layer << " pos " << pos;
                EXPECT_EQ(view.v_blocks[pos / B] + at, kv.v_row(layer, pos)) << "layer " << layer << " pos " << pos;
            }
        }
    }
    KvCache kv(kLayers, kWidth, KvType::f32);
    kv.grow(2 * B + 5);
    write_rows(kv, 0, kv.n_tokens(), 1);
    expect_rows(kv, 0, kv.n_tokens(), 1, "single cache");
}

TEST(KvCache, GrowKeepsWhatWasWritten) {
    KvCache kv(kLayers, kWidth, KvType::f32);
    kv.grow(B - 3);
    write_rows(kv, 0, B - 3, 1);
    kv.grow(B + 2);  // fills the partial block and allocates one more
    write_rows(kv, B - 3, B + 2, 1);
    kv.grow(4 * B);
    write_rows(kv, B + 2, 4 * B, 1);
    expect_rows(kv, 0, 4 * B, 1, "grown cache");
}

// fork() copies block pointers: until someone writes, both sides see the same blocks.
TEST(KvCache, ForkSharesBlocks) {
    KvCache parent(kLayers, kWidth, KvType::f32);
    parent.grow(2 * B + 7);
    write_rows(parent, 0, parent.n_tokens(), 1);
    KvCache child = parent.fork();
    EXPECT_EQ(child.n_tokens(), parent.n_tokens());
    EXPECT_EQ(child.n_blocks(), parent.n_blocks());
    const KvLayerView pv = parent.layer_view(1), cv = child.layer_view(1);
    for (int64_t b = 0; b < parent.n_blocks(); ++b) {
        EXPECT_EQ(pv.k_blocks[b], cv.k_blocks[b]) << "block " << b;
        EXPECT_EQ(pv.v_blocks[b], cv.v_blocks[b]) << "block " << b;
    }
    expect_rows(child, 0, child.n_tokens(), 1, "child");
}

// The last block is partly filled and shared. The fork grows and writes its new positions; the parent
// grows over the same positions with other values. Neither sees the other's writes, both keep the
// common prefix, and the full blocks stay shared (copy-on-write copies only the block written to).
TEST(KvCache, ForkCopiesThePartialBlockOnWrite) {
    const int64_t prefix = 2 * B + 7;
    KvCache parent(kLayers, kWidth, KvType::f32);
    parent.grow(prefix);
    write_rows(parent, 0, prefix, 1);
    KvCache child = parent.fork();

    child.grow(prefix + 5);
    write_rows(child, prefix, prefix + 5, 2);
    expect_rows(parent, 0, prefix, 1, "parent after child wrote");
    EXPECT_EQ(parent.n_tokens(), prefix);

    parent.grow(3 * B + 4);  // crosses into a new block as well
    write_rows(parent, prefix, 3 * B + 4, 3);
    expect_rows(child, 0, prefix, 1, "child prefix after parent wrote");
    expect_rows(child, prefix, prefix + 5, 2, "child suffix after parent wrote");
    expect_rows(parent, 0, prefix, 1, "parent prefix");
    expect_rows(parent, prefix, 3 * B + 4, 3, "parent suffix");

    const KvLayerView pv = parent.layer_view(0), cv = child.layer_view(0);
    EXPECT_EQ(pv.k_blocks[0], cv.k_blocks[0]);
    EXPECT_EQ(pv.k_blocks[1], cv.k_blocks[1]);
    EXPECT_NE(pv.k_blocks[2], cv.k_blocks[2]);
    EXPECT_NE(pv.v_blocks[2], cv.v_blocks[2]);
}

// Forking at a block boundary: both sides grow into fresh blocks; the shared full blocks stay intact.
TEST(KvCache, ForkAtABlockBoundary) {
    KvCache parent(kLayers, kWidth, KvType::f16);
    parent.grow(2 * B);
    KvCache child = parent.fork();
    child.grow(2 * B + 1);
    parent.grow(2 * B + 1);
    const KvLayerView pv = parent.layer_view(2), cv = child.layer_view(2);
    EXPECT_EQ(pv.k_blocks[1], cv.k_blocks[1]);
    EXPECT_NE(pv.k_blocks[2], cv.k_blocks[2]);
}

// Truncating into a shared block and growing again writes into that block: it must be copied first,
// whichever side truncates.
TEST(KvCache, TruncateInsideASharedBlockThenGrow) {
    for (bool child_truncates : {true, false}) {
        const int64_t full = 2 * B + 10;
        for (int64_t cut : {int64_t{B + 5}, int64_t{2 * B + 3}, int64_t{5}}) {
            KvCache a(kLayers, kWidth, KvType::f32);
            a.grow(full);
            write_rows(a, 0, full, 1);
            KvCache b = a.fork();
            KvCache& cutter = child_truncates ? b : a;
            KvCache& other = child_truncates ? a : b;
            cutter.truncate(cut);
            EXPECT_EQ(cutter.n_tokens(), cut);
            expect_rows(cutter, 0, cut, 1, "cutter after truncate");
            cutter.grow(full + 3);
            write_rows(cutter, cut, full + 3, 2);
            expect_rows(other, 0, full, 1, "untouched side");
            expect_rows(cutter, 0, cut, 1, "cutter prefix");
            expect_rows(cutter, cut, full + 3, 2, "cutter rewritten suffix");
            EXPECT_EQ(other.n_tokens(), full);
        }
    }
}

// A fork outliving its parent keeps the blocks alive (shared ownership, not borrowed pointers).
TEST(KvCache, ForkOutlivesParent) {
    KvCache child;
    {
        KvCache parent(kLayers, kWidth, KvType::f32);
        parent.grow(B + 3);
        write_rows(parent, 0, B + 3, 1);
        child = parent.fork();
    }
    expect_rows(child, 0, B + 3, 1, "orphaned child");
    child.grow(B + 6);
    write_rows(child, B + 3, B + 6, 2);
    expect_rows(child, 0, B + 3, 1, "orphaned child after grow");
}

// Blocks come from KvBlockPool and go back to it: a cache built again after another was destroyed (a
// second restore, a new request) reuses the released blocks instead of mapping fresh memory, which is
// what makes a repeated load cost a copy rather than page faults. Copy-on-write copies come from the
// pool too. The width is this test's own (no other test here uses its block size).
TEST(KvCache, BlocksAreRecycledThroughThePool) {
    constexpr int64_t kOwnWidth = 40;
    KvBlockPool& pool = KvBlockPool::instance();
    {
        KvCache first(kLayers, kOwnWidth, KvType::f32);
        first.grow(41 * B);  // as many blocks as the second cache and its fork hold below
    }
    const KvBlockPool::Stats before = pool.stats();
    {
        KvCache second(kLayers, kOwnWidth, KvType::f32);
        second.grow(40 * B);
        KvCache fork = second.fork();
        fork.truncate(B + 1);
        fork.grow(B + 2);  // copy-on-write of block 1
        EXPECT_EQ(pool.stats().live_bytes, before.live_bytes + 41 * second.block_bytes());
    }
    const KvBlockPool::Stats after = pool.stats();
    EXPECT_EQ(after.chunks_mapped_total, before.chunks_mapped_total) << "the second cache mapped new memory";
    EXPECT_EQ(after.live_bytes, before.live_bytes);
}

}  // namespace
}  // namespace kvstash
