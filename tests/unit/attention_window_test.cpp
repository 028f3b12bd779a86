// Sliding-window attention (AttentionShape::window, gemma3's local layers): the query at position p attends
// to keys max(0, p - window + 1)..p. Checked bitwise against the unwindowed kernel run on the same keys moved
// to positions 0..window-1 (a view whose block table starts at the window's first key, one row per block), so
// the window is exact wherever it falls relative to the KV blocks (the windowed cache uses blocks of 16 and
// 5 rows). On every ISA this CPU runs; rows past the window's start are poisoned with NaN in a second pass
// (a key read outside the window would show).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/attention/attention.h"
#include "backends/cpu/runtime/dispatch.h"
#include "format/tensor_type.h"

namespace kvstash {
namespace {

constexpr int64_t kPositions = 70, kHeadDim = 32, kHeads = 4, kKvHeads = 2;

// Rows of width floats (f16 or f32) in one buffer, with a table of block pointers of block_tokens rows.
struct Rows {
    TensorType type;
    uint64_t row_bytes;
    std::vector<uint8_t> k, v;
    Rows(TensorType t, std::mt19937& rng) : type(t), row_bytes(tensor_row_bytes(t, kKvHeads * kHeadDim)) {
        std::normal_distribution<float> normal(0.0f, 1.0f);
        k.resize(kPositions * row_bytes);
        v.resize(kPositions * row_bytes);
        for (auto* buf : {&k, &v}) {
            for (int64_t i = 0; i < kPositions * kKvHeads * kHeadDim; ++i) put(*buf, i, normal(rng));
        }
    }
    void put(std::vector<uint8_t>& buf, int64_t i, float x) const {
        if (type == TensorType::F16) {
            const uint16_t h = fp32_to_fp16(x);
            std::memcpy(buf.data() + 2 * i, &h, 2);
        } else {
            std::memcpy(buf.data() + 4 * i, &x, 4);
        }
    }
};

struct View {
    std::vector<const uint8_t*> k_table, v_table;
    KvLayerView view;
    // Blocks of block_tokens rows starting at row `first` of rows.
    View(const Rows& rows, int64_t first, int64_t block_tokens) {
        for (int64_t r = first; r < kPositions; r += block_tokens) {
            k_table.push_back(rows.k.data() + r * rows.row_bytes);
            v_table.push_back(rows.v.data() + r * rows.row_bytes);
        }
        view.type = rows.type;
        view.block_tokens = block_tokens;
        view.row_bytes = rows.row_bytes;
        view.k_blocks = k_table.data();
        view.v_blocks = v_table.data();
    }
};

TEST(AttentionWindow, EqualsUnwindowedAttentionOverTheWindowsKeys) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> q(kHeads * kHeadDim);
    for (float& x : q) x = normal(rng);
    for (TensorType type : {TensorType::F16, TensorType::F32}) {
        const Rows rows(type, rng);
        for (Isa isa : available_isas()) {
            for (int64_t window : {1, 8, 13}) {
                for (int64_t block_tokens : {16, 5}) {
                    AttentionShape shape{kHeads, kKvHeads, kHeadDim, 0.125f, window};
                    AttentionShape plain = shape;
                    plain.window = 0;
                    const View full(rows, 0, block_tokens);
                    for (int64_t pos = 0; pos < kPositions; ++pos) {
                        const int64_t first = pos >= window ? pos - window + 1 : 0;
                        std::vector<float> got(q.size()), want(q.size());
                        attention_row_heads(isa, shape, full.view, q.data(), pos, 0, kHeads, got.data());
                        const View moved(rows, first, 1);
                        attention_row_heads(isa, plain, moved.view, q.data(), pos - first, 0, kHeads, want.data());
                        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                            << isa_name(isa) << " window " << window << " blocks of " << block_tokens << " pos " << pos;
                    }
                }
            }
        }
    }
}

TEST(AttentionWindow, ReadsNoKeyBeforeTheWindow) {
    std::mt19937 rng(8);
    std::vector<float> q(kHeads * kHeadDim, 0.5f);
    Rows rows(TensorType::F32, rng);
    const int64_t window = 9, pos = 40;
    for (int64_t i = 0; i < (pos - window + 1) * kKvHeads * kHeadDim; ++i) {
        rows.put(rows.k, i, std::numeric_limits<float>::quiet_NaN());
        rows.put(rows.v, i, std::numeric_limits<float>::quiet_NaN());
    }
    const View full(rows, 0, 16);
    for (Isa isa : available_isas()) {
        std::vector<float> out(q.size());
        attention_row_heads(isa, AttentionShape{kHeads, kKvHeads, kHeadDim, 0.125f, window}, full.view, q.data(), pos,
                            0, kHeads, out.data());
        for (float x : out) ASSERT_TRUE(std::isfinite(x)) << isa_name(isa);
    }
}

}  // namespace
}  // namespace kvstash
