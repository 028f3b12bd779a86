// generate_batch(): several sequences generated together (one eval_batch per step) give, per sequence,
// bitwise what generate() on it alone gives: tokens, text, stop reason, the State's tokens and logits and
// the sampler's state; on the default model (SmolLM2), with sequences that stop at different steps and for
// different reasons (stop string, max_tokens, context full, nothing to do).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"
#include "kvstash/tokenizer.h"
#include "support/paths.h"

namespace kvstash {
namespace {

struct Case {
    std::string prompt;
    int64_t n_ctx;
    GenerateOptions options;
};

SamplerParams sampling(uint64_t seed) {
    SamplerParams p;
    p.temperature = 0.9f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.seed = seed;
    return p;
}

TEST(GenerateBatch, EachSequenceIsBitwiseWhatItGivesAlone) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto model = Model::load(test::default_model_path());
    Evaluator evaluator(model, 2);
    GenerateOptions stop_at_newline;
    stop_at_newline.max_tokens = 24;
    stop_at_newline.stop_strings = {"\n"};
    GenerateOptions long_run;
    long_run.max_tokens = 20;
    GenerateOptions none;
    none.max_tokens = 0;
    std::vector<Case> cases = {
        {"The capital of France is", 256, stop_at_newline},
        {"def fibonacci(n):", 256, long_run},
        {"1, 2, 3,", 12, long_run},  // the context fills up first
        {"Hello", 256, none},
    };
    std::vector<State> batched, alone;
    std::vector<Sampler> batched_samplers, alone_samplers;
    batched_samplers.reserve(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto ids = model->tokenizer().encode(cases[i].prompt, AddSpecial::yes, ParseSpecial::yes);
        for (auto* states : {&batched, &alone}) {
            states->emplace_back(*model, StateOptions{.n_ctx = cases[i].n_ctx});
            evaluator.eval(states->back(), ids);
        }
        batched_samplers.emplace_back(sampling(100 + i));
        alone_samplers.emplace_back(sampling(100 + i));
    }
    std::vector<BatchSequence> sequences;
    for (size_t i = 0; i < cases.size(); ++i) {
        sequences.push_back(BatchSequence{&batched[i], &batched_samplers[i], cases[i].options});
    }
    const std::vector<GenerateResult> results = generate_batch(evaluator, sequences);
    ASSERT_EQ(results.size(), cases.size());
    std::vector<std::string> reasons;
    for (size_t i = 0; i < cases.size(); ++i) {
        SCOPED_TRACE(cases[i].prompt);
        const GenerateResult one = generate(evaluator, alone[i], alone_samplers[i], cases[i].options);
        EXPECT_EQ(results[i].tokens, one.tokens);
        EXPECT_EQ(results[i].text, one.text);
        EXPECT_EQ(results[i].stop, one.stop);
        ASSERT_EQ(batched[i].n_tokens(), alone[i].n_tokens());
        EXPECT_TRUE(std::equal(batched[i].tokens().begin(), batched[i].tokens().end(), alone[i].tokens().begin()));
        const auto a = batched[i].last_logits(), b = alone[i].last_logits();
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
        ASSERT_NE(batched[i].sampler_state(), nullptr);
        EXPECT_EQ(batched[i].sampler_state()->rng, alone[i].sampler_state()->rng);
        reasons.push_back(stop_reason_name(one.stop));
    }
    EXPECT_EQ(reasons[2], "context_full");
    EXPECT_EQ(reasons[3], "max_tokens");
    EXPECT_EQ(results[3].tokens.size(), 0u);
}

TEST(GenerateBatch, RefusesWhatItCannotDo) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto model = Model::load(test::default_model_path());
    Evaluator evaluator(model, 1);
    State state(*model, StateOptions{.n_ctx = 64});
    evaluator.eval(state, model->tokenizer().encode("Hi", AddSpecial::yes, ParseSpecial::yes));
    const int64_t n_tokens = state.n_tokens();
    Sampler a(sampling(1)), b(sampling(2));
    const std::vector<BatchSequence> twice = {{&state, &a, {}}, {&state, &b, {}}};
    EXPECT_THROW(generate_batch(evaluator, twice), Error);
    State empty(*model, StateOptions{.n_ctx = 64});
    const std::vector<BatchSequence> no_tokens = {{&empty, &a, {}}};
    EXPECT_THROW(generate_batch(evaluator, no_tokens), Error);
    EXPECT_EQ(state.n_tokens(), n_tokens);  // nothing evaluated
    EXPECT_TRUE(generate_batch(evaluator, {}).empty());
}

}  // namespace
}  // namespace kvstash
