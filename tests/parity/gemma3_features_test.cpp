// The state features built for Llama, on the real Gemma 3 model (models/gemma-3-270m-q4_k_m.gguf), at lengths
// past its 512-token sliding window: the prefix cache (RAM tier, and a disk tier shared by two caches as by two
// processes), a chat session with the gemma template and undo, and the server's scheduler (two requests batched,
// a repeated prompt served from the cache). Each answer is compared bitwise with a cold evaluation without
// cache. tests/parity/gemma3_exactness_test.cpp covers chunking, save/load, fork and batching.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "e2e/server/channel_collect.h"
#include "kvstash/chat.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/prefix_cache.h"
#include "kvstash/sampler.h"
#include "kvstash/session.h"
#include "kvstash/state.h"
#include "server/scheduler.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

std::string gemma3_path() {
    const char* dir = std::getenv("KVSTASH_MODELS_DIR");
    const std::string models = dir != nullptr && *dir != '\0' ? dir : source_dir() + "/models";
    return models + "/gemma-3-270m-q4_k_m.gguf";
}

constexpr int64_t kCtx = 1024;
const StateOptions kOptions{KvType::f16, kCtx};
// A = kLength tokens; B = A's first kShared (past the window, inside a 32-token block) + others.
constexpr int64_t kLength = 680;
constexpr int64_t kShared = 650;

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Gemma3Features : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!fs::exists(gemma3_path())) return;
        model_ = Model::load(gemma3_path());
        const int64_t V = model_->n_vocab();
        a_ = pseudo_random_tokens(kLength, V, 41);
        a_[0] = 2;  // BOS
        b_ = std::vector<int32_t>(a_.begin(), a_.begin() + kShared);
        const auto b_tail = pseudo_random_tokens(kLength - kShared, V, 42);
        b_.insert(b_.end(), b_tail.begin(), b_tail.end());
        b_[kShared] = (a_[kShared] + 1) % static_cast<int32_t>(V);
        // B without cache: its first kShared tokens, then the rest with every position's logits.
        Evaluator evaluator(model_, 2);
        State state(*model_, kOptions);
        evaluator.eval(state, std::span(b_).first(kShared));
        evaluator.eval(state, std::span(b_).subspan(kShared), &b_tail_logits_);
    }
    static void TearDownTestSuite() { model_.reset(); }

    void SetUp() override {
        if (!model_) GTEST_SKIP() << gemma3_path() << " not found: run scripts/fetch_model.sh gemma3";
    }

    // A through `cache` (evaluated and released), then B: B must reuse its kShared tokens and continue with
    // the cold evaluation's logits.
    static CachedPrefix acquire_b_after_a(PrefixCache& a_cache, PrefixCache& b_cache, Evaluator& evaluator) {
        CachedPrefix hit = a_cache.acquire(a_, kOptions);
        EXPECT_EQ(hit.reused_tokens, 0);
        evaluator.eval(hit.state, std::span(a_).subspan(static_cast<size_t>(hit.reused_tokens)));
        a_cache.release(hit.state);
        return b_cache.acquire(b_, kOptions);
    }
    static void expect_b_continues_bitwise(Evaluator& evaluator, CachedPrefix& hit) {
        ASSERT_EQ(hit.reused_tokens, kShared);
        EXPECT_TRUE(hit.partial_block);
        std::vector<float> tail;
        evaluator.eval(hit.state, std::span(b_).subspan(kShared), &tail);
        EXPECT_TRUE(same_bits(tail, b_tail_logits_)) << "logits after the cached prefix differ from no cache";
    }

    static std::shared_ptr<const Model> model_;
    static std::vector<int32_t> a_, b_;
    static std::vector<float> b_tail_logits_;
};

std::shared_ptr<const Model> Gemma3Features::model_;
std::vector<int32_t> Gemma3Features::a_, Gemma3Features::b_;
std::vector<float> Gemma3Features::b_tail_logits_;

TEST_F(Gemma3Features, PrefixCacheRamReusesALongPrefixBitwise) {
    Evaluator evaluator(model_, 2);
    PrefixCache cache(*model_);
    CachedPrefix hit = acquire_b_after_a(cache, cache, evaluator);
    expect_b_continues_bitwise(evaluator, hit);
    EXPECT_EQ(cache.stats().hits, 1u);
}

TEST_F(Gemma3Features, PrefixCacheDiskTierIsSharedByTwoCaches) {
    const fs::path dir = fs::path(::testing::TempDir()) / "gemma3_features_prefix_cache";
    fs::remove_all(dir);
    Evaluator evaluator(model_, 2);
    PrefixCacheOptions options;
    options.disk_dir = dir.string();
    {
        PrefixCache writer(*model_, options);  // another process: A's blocks reach the other cache by disk only
        PrefixCache reader(*model_, options);
        CachedPrefix hit = acquire_b_after_a(writer, reader, evaluator);
        EXPECT_GE(reader.stats().disk_hits, static_cast<uint64_t>(kShared / 32));
        EXPECT_EQ(reader.stats().disk_rejected, 0u);
        expect_b_continues_bitwise(evaluator, hit);
    }
    fs::remove_all(dir);
}

// A system prompt past the window, two turns, undo of the second: the State is cut back without
// recomputation, the repeated turn samples from the same logits, and those are the logits of the whole
// conversation evaluated in one pass.
TEST_F(Gemma3Features, ChatSessionWithGemmaTemplateUndoesBitwise) {
    Evaluator evaluator(model_, 2);
    std::string system;
    for (int i = 0; i < 60; ++i) system += "Rule " + std::to_string(i) + ": answer briefly and politely. ";
    Session chat(evaluator, ChatTemplate::named("gemma"), system, kOptions);
    ASSERT_GT(chat.system_tokens(), 512) << "the system block must pass the sliding window";
    SamplerParams greedy;
    greedy.temperature = 0.0f;
    GenerateOptions g;
    g.max_tokens = 6;
    std::vector<float> first_logits;
    g.on_sample = [&](std::span<const float> logits, int32_t) {
        if (first_logits.empty()) first_logits.assign(logits.begin(), logits.end());
    };
    Sampler s1(greedy);
    chat.reply("Name a fruit.", s1, g);
    const std::vector<int32_t> after_first(chat.state().tokens().begin(), chat.state().tokens().end());
    first_logits.clear();
    Sampler s2(greedy);
    const GenerateResult second = chat.reply("And a colour?", s2, g);
    const std::vector<float> second_logits = first_logits;
    const SessionTurnStats second_stats = chat.last_turn();
    ASSERT_FALSE(second.tokens.empty());

    ASSERT_TRUE(chat.undo());
    if (second_stats.appended) {
        EXPECT_EQ(std::vector<int32_t>(chat.state().tokens().begin(), chat.state().tokens().end()), after_first);
    }
    first_logits.clear();
    Sampler again(greedy);
    EXPECT_EQ(chat.reply("And a colour?", again, g).tokens, second.tokens);
    EXPECT_EQ(chat.last_computed(), second_stats.computed);
    EXPECT_TRUE(same_bits(first_logits, second_logits)) << "the repeated turn's first logits differ";

    // The conversation up to the second reply's first token, evaluated cold in one pass.
    const auto tokens = chat.state().tokens().first(static_cast<size_t>(second_stats.prompt_tokens));
    State cold(*model_, kOptions);
    evaluator.eval(cold, tokens);
    EXPECT_TRUE(same_bits(cold.last_logits(), second_logits)) << "the session's logits differ from one pass";
}

SamplerParams seeded(uint64_t seed) {
    SamplerParams p;
    p.temperature = 0.9f;
    p.top_k = 40;
    p.seed = seed;
    return p;
}

// Two long requests batched in odd prompt chunks answer as generate() alone; the first again is served from the
// prefix cache (cached_tokens) with the same answer.
TEST_F(Gemma3Features, ServerBatchesTwoRequestsAndCachesARepeatedPrompt) {
    // Unrelated prompts (one sharing A's blocks would wait for them and take them from the cache instead).
    std::vector<int32_t> other = pseudo_random_tokens(560, model_->n_vocab(), 43);
    other[0] = 2;  // BOS
    const std::vector<std::vector<int32_t>> prompts{a_, other};
    server::Metrics metrics;
    server::SchedulerOptions options;
    options.threads = 2;
    options.parallel = 2;
    options.step_tokens = 150;
    options.n_ctx = kCtx;
    server::Scheduler scheduler(model_, options, metrics);
    const auto submit = [&](size_t i) {
        auto job = std::make_unique<server::GenerationJob>();
        job->prompt = prompts[i];
        job->sampling = seeded(7 + i);
        job->max_tokens = 6;
        job->top_logprobs = 0;  // logprobs of the sampled tokens: equal logprobs = equal logits
        auto channel = job->channel;
        EXPECT_TRUE(scheduler.submit(std::move(job)));
        return channel;
    };
    const auto c0 = submit(0);
    const auto c1 = submit(1);
    const server::Served served[2] = {server::collect(*c0), server::collect(*c1)};

    const Tokenizer& tok = model_->tokenizer();
    Evaluator evaluator(model_, 2);
    for (size_t i = 0; i < 2; ++i) {
        ASSERT_TRUE(served[i].error.empty()) << served[i].error;
        State state(*model_, kOptions);
        evaluator.eval(state, prompts[i]);
        Sampler sampler(seeded(7 + i));
        GenerateOptions g;
        g.max_tokens = 6;
        std::vector<double> logprobs;
        g.on_sample = [&](std::span<const float> logits, int32_t token) {
            if (!tok.is_eog(token)) logprobs.push_back(server::token_logprob(logits, token, 0).logprob);
        };
        const GenerateResult expected = generate(evaluator, state, sampler, g);
        EXPECT_EQ(served[i].text.at(0), expected.text) << "prompt " << i;
        EXPECT_EQ(served[i].logprobs.at(0), logprobs) << "prompt " << i;
    }

    const server::Served repeated = server::collect(*submit(0));
    ASSERT_TRUE(repeated.error.empty()) << repeated.error;
    EXPECT_GE(repeated.usage.cached_tokens, kLength / 32 * 32) << "the prompt's full blocks from the prefix cache";
    EXPECT_LT(repeated.usage.cached_tokens, kLength);
    EXPECT_EQ(repeated.text.at(0), served[0].text.at(0));
    EXPECT_EQ(repeated.logprobs.at(0), served[0].logprobs.at(0));
}

}  // namespace
}  // namespace kvstash::test
