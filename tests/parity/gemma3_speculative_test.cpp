// Speculative decoding on Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf: window 512, 15 of its 18 layers
// sliding), whose states trim the sliding layers' KV after each eval (StateOptions::trim_sliding_window):
// generate() with a drafter gives the same tokens, text, stop reason, the logits each token was sampled
// from, truncate_floor() and saved state bytes as plain decoding (the reference is plain decoding itself,
// the definition of the promise; tests/unit/speculative_generate_test.cpp covers the sampler settings on
// the tiny model).
//
// A state of n tokens keeps the sliding layers' blocks from position n - 511 - 512 on (the window and as much
// slack, so that truncating back up to 512 positions is free; whole 32-position blocks): a 1,040-token
// prompt crosses block boundaries at n = 1055 and 1087. The oracle drafter (plain decoding's own tokens:
// every guess right; batches of 3, 5, then 9 tokens) makes verification batches that cross them
// (1048 -> 1057, 1084 -> 1093), and a callback stop inside such a batch leaves a state that plain decoding
// trimmed less — unless the trims of a batch's guesses are held back until they are decided
// (StateAccess::hold_trim_for_guesses). Without that hold, stops after 9..14 and 45 tokens fail ("truncate_floor
// differs": the state could no longer be cut back for free as far as plain decoding's). The logits and the
// saved file stay the same there (a file keeps one window of the sliding layers, and truncating behind
// trimmed blocks evaluates everything again, bit-exactly): the trace is the state's reach, not its bits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/sampler.h"
#include "kvstash/speculative.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

using Ids = std::vector<int32_t>;

std::string gemma3_path() {
    const char* dir = std::getenv("KVSTASH_MODELS_DIR");
    const std::string models = dir != nullptr && *dir != '\0' ? dir : source_dir() + "/models";
    return models + "/gemma-3-270m-q4_k_m.gguf";
}

constexpr int64_t kPromptTokens = 1040;
constexpr int64_t kMaxTokens = 56;

// Proposes plain decoding's own continuation after `prompt_size` tokens; with wrong_every = m > 0, every
// m-th guess is wrong (a rejection at each position of a batch in turn).
class OracleDrafter final : public Drafter {
public:
    OracleDrafter(Ids expected, size_t prompt_size, int64_t n_vocab, int wrong_every = 0)
        : expected_(std::move(expected)), prompt_size_(prompt_size), n_vocab_(n_vocab), wrong_every_(wrong_every) {}
    void propose(std::span<const int32_t> context, int32_t max_tokens, std::vector<int32_t>& draft) override {
        for (size_t i = context.size() - prompt_size_; i < expected_.size() && max_tokens > 0; ++i, --max_tokens) {
            const bool wrong = wrong_every_ > 0 && guesses_++ % wrong_every_ == wrong_every_ - 1;
            draft.push_back(wrong ? static_cast<int32_t>((expected_[i] + 1) % n_vocab_) : expected_[i]);
        }
    }
    const char* name() const override { return "oracle"; }

private:
    Ids expected_;
    size_t prompt_size_;
    int64_t n_vocab_;
    int wrong_every_;
    int64_t guesses_ = 0;
};

struct Outcome {
    GenerateResult result;
    std::vector<std::vector<float>> logits;  // what each token was sampled from
    int64_t truncate_floor = 0;
    std::string saved;  // the state file's bytes
};

class Gemma3Speculative : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!std::filesystem::exists(gemma3_path())) return;
        model_ = Model::load(gemma3_path());
        Evaluator evaluator(model_, 2);
        prompt_state_ = std::make_unique<State>(*model_, StateOptions{.kv_type = KvType::f16, .n_ctx = 2048});
        Ids prompt = pseudo_random_tokens(kPromptTokens, model_->n_vocab(), 29);
        prompt[0] = 2;  // BOS
        evaluator.eval(*prompt_state_, prompt);
    }
    static void TearDownTestSuite() {
        prompt_state_.reset();
        model_.reset();
    }
    void SetUp() override {
        if (!model_) GTEST_SKIP() << gemma3_path() << " not found: run scripts/fetch_model.sh gemma3";
    }

    // Generates after a fork of the prompt's state; the callback stops after `stop_after` pieces (-1: never).
    static Outcome run(const SamplerParams& params, std::shared_ptr<Drafter> drafter, int stop_after = -1) {
        Evaluator evaluator(model_, 2);
        State state = prompt_state_->fork();
        Sampler sampler(params);
        GenerateOptions options;
        options.max_tokens = kMaxTokens;
        options.speculation.max_draft = 8;
        options.drafter = std::move(drafter);
        Outcome out;
        options.on_sample = [&out](std::span<const float> l, int32_t) { out.logits.emplace_back(l.begin(), l.end()); };
        int calls = 0;
        out.result = generate(evaluator, state, sampler, options,
                              [&](int32_t, std::string_view) { return stop_after < 0 || ++calls < stop_after; });
        out.truncate_floor = state.truncate_floor();
        const std::string path =
            (std::filesystem::temp_directory_path() / ("kvstash_gemma3_spec_" + std::to_string(::getpid()) + ".kvs"))
                .string();
        save_state(state, path);
        std::ifstream in(path, std::ios::binary);
        out.saved.assign(std::istreambuf_iterator<char>(in), {});
        std::filesystem::remove(path);
        return out;
    }

    static void expect_identical(const Outcome& plain, const Outcome& spec, const std::string& what) {
        SCOPED_TRACE(what);
        EXPECT_EQ(plain.result.tokens, spec.result.tokens);
        EXPECT_EQ(plain.result.text, spec.result.text);
        EXPECT_EQ(plain.result.stop, spec.result.stop);
        ASSERT_EQ(plain.logits.size(), spec.logits.size());
        for (size_t i = 0; i < plain.logits.size(); ++i) {
            ASSERT_EQ(0, std::memcmp(plain.logits[i].data(), spec.logits[i].data(), plain.logits[i].size() * 4))
                << "logits of token " << i << " differ";
        }
        EXPECT_EQ(plain.truncate_floor, spec.truncate_floor) << "truncate_floor differs";
        EXPECT_TRUE(plain.saved == spec.saved) << "the saved state files differ";
    }

    static std::shared_ptr<const Model> model_;
    static std::unique_ptr<State> prompt_state_;
};

std::shared_ptr<const Model> Gemma3Speculative::model_;
std::unique_ptr<State> Gemma3Speculative::prompt_state_;

SamplerParams sampling(float temperature) {
    SamplerParams p;
    p.temperature = temperature;
    p.seed = 7;
    return p;
}

TEST_F(Gemma3Speculative, EveryDrafterIsIdenticalAcrossTrimmedBlocks) {
    for (float temperature : {0.0f, 0.8f}) {
        const SamplerParams params = sampling(temperature);
        const Outcome plain = run(params, nullptr);
        ASSERT_EQ(plain.result.tokens.size(), static_cast<size_t>(kMaxTokens));
        EXPECT_GT(plain.truncate_floor, 0) << "the sliding layers were trimmed";
        const int64_t n_vocab = model_->n_vocab();
        const Outcome oracle =
            run(params, std::make_shared<OracleDrafter>(plain.result.tokens, kPromptTokens, n_vocab));
        expect_identical(plain, oracle, "oracle");
        EXPECT_EQ(oracle.result.accepted, oracle.result.drafted);
        EXPECT_GT(oracle.result.accepted, kMaxTokens / 2);
        const Outcome wrong =
            run(params, std::make_shared<OracleDrafter>(plain.result.tokens, kPromptTokens, n_vocab, 3));
        expect_identical(plain, wrong, "oracle, every 3rd wrong");
        EXPECT_LT(wrong.result.accepted, wrong.result.drafted);
        expect_identical(plain, run(params, make_lookup_drafter()), "lookup");
        expect_identical(plain, run(params, make_model_drafter(model_, *model_, {.n_threads = 2})), "draft model");
    }
}

TEST_F(Gemma3Speculative, StopsInsideABatchThatCrossedATrimAreIdentical) {
    // Stops after 8..14 and 40..47 pieces: inside the batches that cross 1055 and 1087 tokens.
    const SamplerParams params = sampling(0.0f);
    const Ids expected = run(params, nullptr).result.tokens;
    for (auto [first, last] : {std::pair{8, 14}, std::pair{40, 47}}) {
        for (int stop_after = first; stop_after <= last; ++stop_after) {
            const Outcome plain = run(params, nullptr, stop_after);
            const Outcome oracle =
                run(params, std::make_shared<OracleDrafter>(expected, kPromptTokens, model_->n_vocab()), stop_after);
            expect_identical(plain, oracle, "callback stop after " + std::to_string(stop_after));
        }
    }
}

}  // namespace
}  // namespace kvstash::test
