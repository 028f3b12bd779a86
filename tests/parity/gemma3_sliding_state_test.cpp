// Sliding-window KV trimming on the real Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf, window 512, 15 of
// its 18 layers sliding): a state of 1,100 tokens (> 2 × window) holds the sliding layers' KV for about two
// windows, its state file stores one window of them, and generating on, saving and loading, and truncating
// before the trimmed window (the recompute path) each give the bits of a cold evaluation of the same tokens.
// tests/unit/sliding_window_state_test.cpp covers the same on the tiny fixture, case by case.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "state/state_access.h"
#include "state/state_file_format.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace sf = state_file;

std::string gemma3_path() {
    const char* dir = std::getenv("KVSTASH_MODELS_DIR");
    const std::string models = dir != nullptr && *dir != '\0' ? dir : source_dir() + "/models";
    return models + "/gemma-3-270m-q4_k_m.gguf";
}

constexpr int64_t kWindow = 512;
constexpr int64_t kLength = 1100;
constexpr int64_t kTruncateTo = 300;  // before the trimmed window: evaluated again from 0

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

TEST(Gemma3SlidingState, TrimmedStateContinuesLikeAColdEvaluation) {
    if (!std::filesystem::exists(gemma3_path()))
        GTEST_SKIP() << gemma3_path() << " not found: run scripts/fetch_model.sh gemma3";
    std::shared_ptr<const Model> model = Model::load(gemma3_path());
    Evaluator evaluator(model, 2);
    std::vector<int32_t> tokens = pseudo_random_tokens(kLength + 3, model->n_vocab(), 17);
    tokens[0] = 2;  // BOS
    const std::span<const int32_t> all(tokens);
    const StateOptions options{KvType::f16, 2048};
    StateOptions whole = options;
    whole.trim_sliding_window = false;

    // Cold: one pass, nothing trimmed; logits after kLength + 1, + 2, + 3 tokens.
    std::vector<std::vector<float>> cold;
    {
        State c(*model, whole);
        evaluator.eval(c, all.first(kLength + 1));
        for (int64_t n = kLength + 1; n <= kLength + 3; ++n) {
            if (n > kLength + 1) evaluator.eval(c, all.subspan(static_cast<size_t>(n - 1), 1));
            cold.emplace_back(c.last_logits().begin(), c.last_logits().end());
        }
        EXPECT_EQ(StateAccess::kv(c).n_trimmed_blocks(), 0);
    }

    // Trimmed: evaluated in chunks of 256, then token by token.
    State s(*model, options);
    for (int64_t at = 0; at < kLength; at += 256)
        evaluator.eval(s,
                       all.subspan(static_cast<size_t>(at), static_cast<size_t>(std::min<int64_t>(256, kLength - at))));
    const KvCache& kv = StateAccess::kv(s);
    ASSERT_EQ(kv.n_global_layers(), 3);
    const int64_t held = kv.n_blocks() - kv.n_trimmed_blocks();
    EXPECT_EQ(kv.n_trimmed_blocks(), (kLength - 2 * kWindow + 1) / kv_block_tokens);
    EXPECT_LE(held, 2 * kWindow / kv_block_tokens + 2);
    const uint64_t untrimmed = static_cast<uint64_t>(kv.n_blocks()) * kv.block_bytes();
    std::printf("Gemma 3 270M, %lld tokens: KV held %.2f MB (untrimmed %.2f MB); %lld of %lld blocks trimmed\n",
                static_cast<long long>(kLength), s.kv_bytes() / 1e6, untrimmed / 1e6,
                static_cast<long long>(kv.n_trimmed_blocks()), static_cast<long long>(kv.n_blocks()));
    evaluator.eval(s, all.subspan(kLength, 1));
    EXPECT_TRUE(same_bits(s.last_logits(), cold[0])) << "trimmed state, next token";

    // Saved and loaded: the file holds one window of sliding KV and continues bitwise.
    const std::vector<uint8_t> file = sf::encode_state_to_memory(s);
    const StateFileInfo info = sf::inspect_state_bytes(file, "trimmed", Checksums::verify);
    const uint64_t full_kv = static_cast<uint64_t>(kv.n_blocks()) * kv.block_bytes();
    std::printf("state file %.2f MB, KV section %.2f MB (every block whole: %.2f MB)\n", file.size() / 1e6,
                info.kv_bytes / 1e6, full_kv / 1e6);
    EXPECT_EQ(info.format_version, 3u);
    EXPECT_LT(info.kv_bytes, full_kv * 6 / 10);
    State loaded = sf::decode_state(*model, file, "trimmed");
    State loaded_fork = loaded.fork();
    evaluator.eval(s, all.subspan(kLength + 1, 1));
    EXPECT_TRUE(same_bits(s.last_logits(), cold[1]));
    evaluator.eval(loaded, all.subspan(kLength + 1, 1));
    EXPECT_TRUE(same_bits(loaded.last_logits(), cold[1])) << "loaded state, next token";
    evaluator.eval(loaded, all.subspan(kLength + 2, 1));
    EXPECT_TRUE(same_bits(loaded.last_logits(), cold[2]));

    // Truncated before the loaded state's floor: everything is evaluated again, bitwise.
    ASSERT_GT(loaded_fork.truncate_floor(), kTruncateTo);
    loaded_fork.truncate(kTruncateTo);
    EXPECT_EQ(loaded_fork.n_pending(), kTruncateTo);
    evaluator.eval(loaded_fork, all.subspan(kTruncateTo, 1));
    State short_cold(*model, whole);
    evaluator.eval(short_cold, all.first(kTruncateTo + 1));
    EXPECT_TRUE(same_bits(loaded_fork.last_logits(), short_cold.last_logits())) << "recomputed after truncate";
}

}  // namespace
}  // namespace kvstash::test
