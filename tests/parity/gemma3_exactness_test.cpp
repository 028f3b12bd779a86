// The invariant on the real Gemma 3 model (models/gemma-3-270m-q4_k_m.gguf), at lengths past its 512-token
// sliding window so that the local layers' window has begun to slide: the logits at a position are the same
// bits however the tokens arrived — one call, chunks, after save and load, after a fork, batched with another
// sequence. The window is a function of the query's position alone (backends/cpu/attention/attention.h), so none of
// these may change a bit. Full logit rows are 1 MiB each (262,144 entries): compared at the last position of the prefix
// and over a tail of kTail positions.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

std::string gemma3_path() {
    const char* dir = std::getenv("KVSTASH_MODELS_DIR");
    const std::string models = dir != nullptr && *dir != '\0' ? dir : source_dir() + "/models";
    return models + "/gemma-3-270m-q4_k_m.gguf";
}

constexpr int64_t kPrefix = 600;  // past the 512-token window
constexpr int64_t kTail = 6;

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Gemma3Exactness : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!std::filesystem::exists(gemma3_path())) return;
        model_ = Model::load(gemma3_path());
        tokens_ = pseudo_random_tokens(kPrefix + kTail, model_->n_vocab(), 14);
        tokens_[0] = 2;  // BOS
        Evaluator evaluator(model_, 2);
        State state(*model_);
        evaluator.eval(state, std::span(tokens_).first(kPrefix));
        want_last_ = std::vector<float>(state.last_logits().begin(), state.last_logits().end());
        evaluator.eval(state, std::span(tokens_).subspan(kPrefix), &want_tail_);
    }
    static void TearDownTestSuite() { model_.reset(); }

    void SetUp() override {
        if (!model_) GTEST_SKIP() << gemma3_path() << " not found: run scripts/fetch_model.sh gemma3";
    }

    // `state` holds tokens_[0, kPrefix): its last logits, then the tail's, must be the one-pass ones.
    void expect_continues_bitwise(Evaluator& evaluator, State& state, const char* what) {
        ASSERT_EQ(state.n_tokens(), kPrefix) << what;
        EXPECT_TRUE(same_bits(state.last_logits(), want_last_)) << what << ": last logits of the prefix";
        std::vector<float> tail;
        evaluator.eval(state, std::span(tokens_).subspan(kPrefix), &tail);
        EXPECT_TRUE(same_bits(tail, want_tail_)) << what << ": logits of the tail";
    }

    static std::shared_ptr<const Model> model_;
    static std::vector<int32_t> tokens_;
    static std::vector<float> want_last_, want_tail_;
};

std::shared_ptr<const Model> Gemma3Exactness::model_;
std::vector<int32_t> Gemma3Exactness::tokens_;
std::vector<float> Gemma3Exactness::want_last_, Gemma3Exactness::want_tail_;

TEST_F(Gemma3Exactness, ChunkedPrefillAndOneThreadEqualOnePass) {
    // Chunk ends before, at and after the window's start (position 512), and inside KV blocks.
    for (const std::vector<int64_t>& chunks : std::vector<std::vector<int64_t>>{{511, 1, 88}, {200, 313, 87}}) {
        Evaluator evaluator(model_, 2);
        State state(*model_);
        int64_t done = 0;
        for (int64_t n : chunks) {
            evaluator.eval(state, std::span(tokens_).subspan(static_cast<size_t>(done), static_cast<size_t>(n)));
            done += n;
        }
        expect_continues_bitwise(evaluator, state, ("chunks from " + std::to_string(chunks[0])).c_str());
    }
    Evaluator one_thread(model_, 1);
    State state(*model_);
    one_thread.eval(state, std::span(tokens_).first(kPrefix));
    expect_continues_bitwise(one_thread, state, "one thread");
}

TEST_F(Gemma3Exactness, SaveLoadContinuesBitwise) {
    Evaluator evaluator(model_, 2);
    State state(*model_);
    evaluator.eval(state, std::span(tokens_).first(530));
    const std::string file = ::testing::TempDir() + "gemma3_saved.kvstate";
    save_state(state, file);
    State loaded = load_state(*model_, file);
    std::filesystem::remove(file);
    ASSERT_EQ(loaded.n_tokens(), 530);
    evaluator.eval(loaded, std::span(tokens_).subspan(530, kPrefix - 530));
    expect_continues_bitwise(evaluator, loaded, "saved at 530, loaded");
}

TEST_F(Gemma3Exactness, ForkContinuesBitwise) {
    Evaluator evaluator(model_, 2);
    State trunk(*model_);
    evaluator.eval(trunk, std::span(tokens_).first(520));
    State branch = trunk.fork();
    const auto other = pseudo_random_tokens(20, model_->n_vocab(), 15);
    evaluator.eval(trunk, other);  // the trunk goes elsewhere; the shared blocks must not change
    evaluator.eval(branch, std::span(tokens_).subspan(520, kPrefix - 520));
    expect_continues_bitwise(evaluator, branch, "fork at 520");
}

TEST_F(Gemma3Exactness, BatchedWithAnotherSequenceEqualsAlone) {
    Evaluator evaluator(model_, 2);
    const auto other = pseudo_random_tokens(540, model_->n_vocab(), 16);
    State other_alone(*model_);
    evaluator.eval(other_alone, other);
    State a(*model_), b(*model_);
    const EvalRequest batch[] = {{&a, std::span(tokens_).first(kPrefix), nullptr}, {&b, other, nullptr}};
    evaluator.eval_batch(batch);
    EXPECT_TRUE(same_bits(b.last_logits(), other_alone.last_logits()));
    expect_continues_bitwise(evaluator, a, "batched with a 540-token sequence");
}

}  // namespace
}  // namespace kvstash::test
