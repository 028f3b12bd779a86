// Sliding-window KV trimming (StateOptions::trim_sliding_window, KvCache::trim_sliding, state file version 3)
// on the tiny Gemma 3 fixture (tests/fixtures/gemma3_tiny/: window 8, sliding layers 0, 1, 3, 4, global 2 and
// 5): a state several windows long holds its sliding layers' KV for O(window) positions only, and every way
// of going on from it (eval, fork, truncate to either side of truncate_floor(), save and load, an old format
// version 2 file) gives the bits of a cold evaluation of the same tokens.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/prefix_cache.h"
#include "kvstash/state.h"
#include "state/state_access.h"
#include "state/state_file_format.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace sf = state_file;

constexpr int64_t kWindow = 8;  // the fixture's
constexpr int64_t kLength = 300;
const StateOptions kOptions{KvType::f16, 1024};

class SlidingWindowState : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        model_ = Model::load(fixture_path("gemma3_tiny/gemma3_tiny_f32.gguf"));
        tokens_ = pseudo_random_tokens(kLength + 64, model_->n_vocab(), 7);
    }
    static void TearDownTestSuite() { model_.reset(); }

    std::span<const int32_t> first(int64_t n) const {
        return std::span<const int32_t>(tokens_).first(static_cast<size_t>(n));
    }
    std::span<const int32_t> range(int64_t from, int64_t to) const {
        return std::span<const int32_t>(tokens_).subspan(static_cast<size_t>(from), static_cast<size_t>(to - from));
    }
    // The logits after tokens [0, n) evaluated in one pass into a fresh state that trims nothing.
    std::vector<float> cold(int64_t n) {
        StateOptions whole = kOptions;
        whole.trim_sliding_window = false;
        State s(*model_, whole);
        evaluator_.eval(s, first(n));
        return {s.last_logits().begin(), s.last_logits().end()};
    }
    // A state of the first n tokens, evaluated in chunks of 40 (trimmed after each).
    State trimmed(int64_t n, StateOptions options = kOptions) {
        State s(*model_, options);
        for (int64_t at = 0; at < n; at += 40) evaluator_.eval(s, range(at, std::min(at + 40, n)));
        return s;
    }
    static bool same_bits(std::span<const float> a, std::span<const float> b) {
        return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
    }
    // Evaluates tokens [s.n_tokens(), to) one at a time, each step's logits against a cold evaluation.
    void expect_continues_cold(State& s, int64_t to) {
        for (int64_t n = s.n_tokens() + 1; n <= to; ++n) {
            evaluator_.eval(s, range(n - 1, n));
            ASSERT_TRUE(same_bits(s.last_logits(), cold(n))) << "logits after " << n << " tokens";
        }
    }

    static std::shared_ptr<const Model> model_;
    static std::vector<int32_t> tokens_;
    Evaluator evaluator_{model_, 2};
};

std::shared_ptr<const Model> SlidingWindowState::model_;
std::vector<int32_t> SlidingWindowState::tokens_;

TEST_F(SlidingWindowState, HoldsOnlyTheWindowAndSlackOfSlidingLayers) {
    State s = trimmed(kLength);
    const KvCache& kv = StateAccess::kv(s);
    ASSERT_EQ(kv.n_global_layers(), 2);
    // Kept: the window plus one window of slack before the next position, whole blocks.
    const int64_t keep_from = kLength - kWindow + 1 - kWindow;
    EXPECT_EQ(kv.n_trimmed_blocks(), keep_from / kv_block_tokens);
    EXPECT_LE(kv.n_blocks() - kv.n_trimmed_blocks(), (2 * kWindow + kv_block_tokens - 1) / kv_block_tokens + 1);
    EXPECT_EQ(s.truncate_floor(), kv.trimmed_until() + kWindow - 1);
    EXPECT_EQ(s.kv_bytes(), static_cast<uint64_t>(kv.n_trimmed_blocks()) * kv.block_bytes() * 2 / 6 +
                                static_cast<uint64_t>(kv.n_blocks() - kv.n_trimmed_blocks()) * kv.block_bytes());
    EXPECT_TRUE(same_bits(s.last_logits(), cold(kLength)));

    // Stays bounded token by token.
    for (int64_t n = kLength; n < kLength + 40; ++n) {
        evaluator_.eval(s, range(n, n + 1));
        EXPECT_LE(kv.n_blocks() - kv.n_trimmed_blocks(), 2);
    }
    // Off: everything kept.
    StateOptions whole = kOptions;
    whole.trim_sliding_window = false;
    State full = trimmed(kLength, whole);
    EXPECT_EQ(StateAccess::kv(full).n_trimmed_blocks(), 0);
    EXPECT_EQ(full.truncate_floor(), 0);
}

TEST_F(SlidingWindowState, GeneratesForksAndTruncatesBitwise) {
    State s = trimmed(kLength);
    ASSERT_GT(s.truncate_floor(), 0);
    State fork = s.fork();
    expect_continues_cold(s, kLength + 5);
    expect_continues_cold(fork, kLength + 3);  // the fork is untouched by the original's steps

    // Inside the slack: nothing evaluated again.
    State inside = trimmed(kLength);
    const int64_t near = inside.truncate_floor() + 3;
    inside.truncate(near);
    EXPECT_EQ(inside.n_pending(), 0);
    expect_continues_cold(inside, near + 4);

    // Before the floor: the window is gone, the next eval starts over from 0.
    // -1: just below the floor (the window before it starts one position too early).
    for (int64_t to : {int64_t{-1}, int64_t{200}, int64_t{kWindow}, int64_t{1}}) {
        State before = trimmed(kLength);
        const int64_t floor = before.truncate_floor();
        if (to < 0) to = floor - 1;
        ASSERT_LT(to, floor);
        before.truncate(to);
        EXPECT_EQ(before.n_pending(), to);
        EXPECT_EQ(before.truncate_floor(), 0);
        before.truncate(to - 1 > 0 ? to - 1 : to);  // truncating a pending state again
        const int64_t n = before.n_tokens();
        expect_continues_cold(before, n + 3);
    }
}

TEST_F(SlidingWindowState, StateFileStoresTheWindowAndContinuesBitwise) {
    State s = trimmed(kLength);
    StateOptions whole = kOptions;
    whole.trim_sliding_window = false;
    State full = trimmed(kLength, whole);
    const std::vector<uint8_t> small = sf::encode_state_to_memory(s);
    const std::vector<uint8_t> big = sf::encode_state_to_memory(full);
    EXPECT_EQ(sf::load_le<uint32_t>(&small[sf::header::format_version]), 3u);
    // The file trims down to the window itself (no slack): (kLength - window + 1) / 32 trimmed blocks.
    const int64_t file_trimmed = (kLength - kWindow + 1) / kv_block_tokens;
    const int64_t n_blocks = (kLength + kv_block_tokens - 1) / kv_block_tokens;
    const uint64_t block = StateAccess::kv(s).block_bytes();
    const uint64_t kv_expected =
        static_cast<uint64_t>(n_blocks - file_trimmed) * block + static_cast<uint64_t>(file_trimmed) * block * 2 / 6;
    EXPECT_EQ(sf::inspect_state_bytes(small, "small", Checksums::verify).kv_bytes, kv_expected);
    EXPECT_EQ(sf::inspect_state_bytes(big, "big", Checksums::verify).kv_bytes, kv_expected);  // same: trimmed on save
    EXPECT_EQ(small, big) << "the file does not depend on how much the State kept in memory";

    State loaded = sf::decode_state(*model_, small, "small");
    EXPECT_EQ(StateAccess::kv(loaded).n_trimmed_blocks(), file_trimmed);
    EXPECT_EQ(loaded.truncate_floor(), file_trimmed * kv_block_tokens + kWindow - 1);
    EXPECT_TRUE(same_bits(loaded.last_logits(), cold(kLength)));
    State loaded_fork = loaded.fork();
    expect_continues_cold(loaded, kLength + 4);

    // Saved again after going on: still continues.
    const std::vector<uint8_t> again = sf::encode_state_to_memory(loaded);
    State reloaded = sf::decode_state(*model_, again, "again");
    expect_continues_cold(reloaded, kLength + 8);

    // Truncated below the loaded floor: recomputed from 0, bitwise; saved while pending, loads pending.
    loaded_fork.truncate(100);
    EXPECT_EQ(loaded_fork.n_pending(), 100);
    State pending = sf::decode_state(*model_, sf::encode_state_to_memory(loaded_fork), "pending");
    EXPECT_EQ(pending.n_pending(), 100);
    expect_continues_cold(pending, 103);
    expect_continues_cold(loaded_fork, 102);
}

// A version 2 file (what kvstash wrote for Gemma 3 before version 3: every block whole) still loads.
TEST_F(SlidingWindowState, VersionTwoFileStillLoads) {
    StateOptions whole = kOptions;
    whole.trim_sliding_window = false;
    const int64_t n = 20;  // shorter than a block past the window: the version 3 file trims nothing
    State full = trimmed(n, whole);
    std::vector<uint8_t> v2 = sf::encode_state_to_memory(full);
    // Rewrite as version 2: version field, and the version 3 meta fields back to zero (reserved).
    sf::store_le<uint32_t>(&v2[sf::header::format_version], 2);
    const sf::SectionEntry meta = sf::load_section_entry(v2.data() + sf::kHeaderBytes);
    ASSERT_EQ(meta.type, sf::kSectionMeta);
    std::memset(v2.data() + meta.offset + sf::meta::reserved_v2, 0, sf::kMetaFixedBytesV2 - sf::meta::reserved_v2);
    sf::rewrite_checksums(v2);
    const StateFileInfo info = sf::inspect_state_bytes(v2, "v2", Checksums::verify);
    EXPECT_EQ(info.format_version, 2u);
    EXPECT_TRUE(info.checksums_ok);
    State loaded = sf::decode_state(*model_, v2, "v2");
    EXPECT_EQ(StateAccess::kv(loaded).n_trimmed_blocks(), 0);
    expect_continues_cold(loaded, n + 60);  // and trims as it goes on
    EXPECT_GT(StateAccess::kv(loaded).n_trimmed_blocks(), 0);
}

// Version 3 meta fields are checked: more trimmed blocks than the window allows, or another window or
// number of global layers than the model's, is a bad file (not a State missing KV it would need).
TEST_F(SlidingWindowState, VersionThreeMetaIsChecked) {
    const std::vector<uint8_t> good = sf::encode_state_to_memory(trimmed(kLength));
    const sf::SectionEntry meta = sf::load_section_entry(good.data() + sf::kHeaderBytes);
    ASSERT_EQ(meta.type, sf::kSectionMeta);
    ASSERT_EQ(sf::load_le<int64_t>(&good[meta.offset + sf::meta::n_trimmed_blocks]), (kLength - kWindow + 1) / 32);
    const auto edited = [&](size_t field, int64_t value) {
        std::vector<uint8_t> b = good;
        sf::store_le<int64_t>(&b[meta.offset + field], value);
        sf::rewrite_checksums(b);
        return b;
    };
    const auto expect_bad = [&](const std::vector<uint8_t>& file, const std::string& what) {
        try {
            (void)sf::decode_state(*model_, file, "edited");
            ADD_FAILURE() << "loaded a file with " << what;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::bad_format) << e.what();
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    expect_bad(edited(sf::meta::n_trimmed_blocks, (kLength - kWindow + 1) / 32 + 1), "n_trimmed_blocks");
    expect_bad(edited(sf::meta::sliding_window, kWindow + 1), "sliding window");
    expect_bad(edited(sf::meta::n_global_kv_layers, 3), "section 'kv'");  // its size follows from it
    expect_bad(edited(sf::meta::sliding_window, 0), "sliding_window");
}

// The prefix cache takes whole blocks only: a trimmed State is refused, the States it hands out keep all.
TEST_F(SlidingWindowState, PrefixCacheKeepsWholeBlocks) {
    PrefixCache cache(*model_);
    State s = trimmed(kLength);
    cache.release(s);
    EXPECT_EQ(cache.stats().releases_rejected, 1u);
    CachedPrefix hit = cache.acquire(first(kLength), kOptions);
    evaluator_.eval(hit.state, range(hit.reused_tokens, kLength));
    EXPECT_EQ(StateAccess::kv(hit.state).n_trimmed_blocks(), 0);
    cache.release(hit.state);
    EXPECT_EQ(cache.stats().releases_rejected, 1u);
    CachedPrefix again = cache.acquire(first(kLength), kOptions);
    EXPECT_GE(again.reused_tokens, (kLength - 1) / kv_block_tokens * kv_block_tokens);
    evaluator_.eval(again.state, range(again.reused_tokens, kLength));
    EXPECT_TRUE(same_bits(again.state.last_logits(), cold(kLength)));
}

}  // namespace
}  // namespace kvstash::test
