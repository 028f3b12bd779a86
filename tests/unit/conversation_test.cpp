// process_prefix / generate_with_prefix / Conversation: the conveniences reuse cached work and give
// exactly what computing everything afresh gives.
#include <gtest/gtest.h>

#include <cstring>

#include "kvstash/conversation.h"
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

TEST(Conversation, GenerateWithPrefixEqualsOnePassAndLeavesThePrefixAlone) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(default_model_path());
    Evaluator evaluator(model, 2);
    const State prefix = process_prefix(evaluator, "The three primary colors are");
    const std::vector<int32_t> prefix_tokens(prefix.tokens().begin(), prefix.tokens().end());
    GenerateOptions options;
    options.max_tokens = 12;
    Sampler s1(greedy());
    const GenerateResult forked = generate_with_prefix(evaluator, prefix, " red,", s1, options);
    EXPECT_EQ(std::vector<int32_t>(prefix.tokens().begin(), prefix.tokens().end()), prefix_tokens);

    State whole(*model);
    auto tokens = prefix_tokens;
    const auto more = model->tokenizer().encode(" red,", false, true);
    tokens.insert(tokens.end(), more.begin(), more.end());
    evaluator.eval(whole, tokens);
    Sampler s2(greedy());
    const GenerateResult direct = generate(evaluator, whole, s2, options);
    EXPECT_EQ(forked.tokens, direct.tokens);
    EXPECT_EQ(forked.text, direct.text);
}

TEST(Conversation, LaterTurnsReuseEarlierOnesAndMatchAFreshComputation) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(default_model_path());
    Evaluator evaluator(model, 2);
    Conversation chat(evaluator, ChatTemplate::for_model(*model), "You answer in one short sentence.");
    GenerateOptions options;
    options.max_tokens = 24;
    Sampler sampler(greedy());
    chat.reply("What is the capital of France?", sampler, options);
    const int64_t after_first = chat.state().n_tokens();
    EXPECT_GT(chat.last_reused(), 0) << "the system prompt should have been cached at construction";
    chat.reply("And of Italy?", sampler, options);
    EXPECT_GE(chat.last_reused(), after_first / 2) << "the second turn recomputed the first";
    ASSERT_EQ(chat.messages().size(), 5u);
    EXPECT_EQ(chat.messages()[4].role, "assistant");

    // The state's logits equal evaluating its tokens from scratch, bitwise.
    const std::vector<int32_t> tokens(chat.state().tokens().begin(), chat.state().tokens().end());
    State fresh(*model);
    evaluator.eval(fresh, tokens);
    ASSERT_EQ(fresh.last_logits().size(), chat.state().last_logits().size());
    EXPECT_EQ(
        0, std::memcmp(fresh.last_logits().data(), chat.state().last_logits().data(), fresh.last_logits().size() * 4));

    chat.reset();
    EXPECT_EQ(chat.messages().size(), 1u);
    chat.reply("Hi", sampler, options);
    EXPECT_GT(chat.last_reused(), 5);
}

}  // namespace
}  // namespace kvstash::test
