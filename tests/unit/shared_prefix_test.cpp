// evaluate_prefix / generate_from_prefix: a continuation of a shared prefix gives exactly what computing
// everything afresh gives, and leaves the prefix alone.
#include <gtest/gtest.h>

#include "kvstash/shared_prefix.h"
#include "kvstash/tokenizer.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

SamplerParams greedy() {
    SamplerParams p;
    p.temperature = 0.0f;
    return p;
}

TEST(SharedPrefix, GenerateFromPrefixEqualsOnePassAndLeavesThePrefixAlone) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(default_model_path());
    Evaluator evaluator(model, 2);
    const State prefix = evaluate_prefix(evaluator, "The three primary colors are");
    const std::vector<int32_t> prefix_tokens(prefix.tokens().begin(), prefix.tokens().end());
    GenerateOptions options;
    options.max_tokens = 12;
    Sampler s1(greedy());
    const GenerateResult forked = generate_from_prefix(evaluator, prefix, " red,", s1, options);
    EXPECT_EQ(std::vector<int32_t>(prefix.tokens().begin(), prefix.tokens().end()), prefix_tokens);

    State whole(*model);
    auto tokens = prefix_tokens;
    const auto more = model->tokenizer().encode(" red,", AddSpecial::no, ParseSpecial::yes);
    tokens.insert(tokens.end(), more.begin(), more.end());
    evaluator.eval(whole, tokens);
    Sampler s2(greedy());
    const GenerateResult direct = generate(evaluator, whole, s2, options);
    EXPECT_EQ(forked.tokens, direct.tokens);
    EXPECT_EQ(forked.text, direct.text);
}

}  // namespace
}  // namespace kvstash::test
