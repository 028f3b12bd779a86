// generate() with a GrammarConstraint on the tiny random-weight model (whose output, unconstrained, is
// byte soup): for many seeds the text is always a sentence of the grammar and JSON output parses; the
// constraint leaves unconstrained generation alone (same tokens, same logits, bit for bit).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/grammar_access.h"
#include "grammar/grammar_matcher.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/grammar.h"
#include "kvstash/model.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"
#include "kvstash/tokenizer.h"
#include "support/paths.h"

namespace kvstash {
namespace {

std::shared_ptr<const Model> tiny_model() {
    static const auto model = Model::load(test::fixture_path("tiny/gqa_f32.gguf"));
    return model;
}

SamplerParams hot(uint64_t seed) {
    SamplerParams p;
    p.temperature = 1.5f;  // a random model at a high temperature: the grammar has to do all the work
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

GenerateResult run(const std::shared_ptr<const Grammar>& grammar, uint64_t seed, int64_t max_tokens,
                   std::vector<std::vector<float>>* logits = nullptr) {
    auto model = tiny_model();
    Evaluator evaluator(model, 1);
    State state(*model, StateOptions{});
    const std::vector<int32_t> prompt = model->tokenizer().encode("hi", AddSpecial::no, ParseSpecial::no);
    evaluator.eval(state, prompt);
    Sampler sampler(hot(seed));
    GenerateOptions options;
    options.max_tokens = max_tokens;
    if (grammar) {
        static const auto vocabulary = GrammarVocabulary::build(model->tokenizer());
        options.constraint = std::make_shared<GrammarConstraint>(grammar, vocabulary);
    }
    if (logits) {
        options.on_sample = [logits](std::span<const float> l, int32_t) { logits->emplace_back(l.begin(), l.end()); };
    }
    return generate(evaluator, state, sampler, options);
}

bool grammar_accepts(const std::shared_ptr<const Grammar>& grammar, const std::string& text) {
    static const auto vocabulary = GrammarVocabulary::build(tiny_model()->tokenizer());
    GrammarConstraint c(grammar, vocabulary);
    return c.accept_text(text) && c.can_end();
}

TEST(ConstrainedGenerate, OutputAlwaysMatchesTheGrammar) {
    const auto grammar = Grammar::from_gbnf("root ::= (\"yes\" | \"no\" | [0-9]{1,3}) (\", \" [a-c]+)*\n");
    for (uint64_t seed = 0; seed < 20; ++seed) {
        const GenerateResult r = run(grammar, seed, 200);
        // Either complete (the grammar let only the end come) or cut by max_tokens as a valid prefix.
        GrammarConstraint check(grammar, GrammarVocabulary::build(tiny_model()->tokenizer()));
        EXPECT_TRUE(check.accept_text(r.text)) << seed << ": " << r.text;
        if (r.stop == StopReason::end_of_generation) {
            EXPECT_TRUE(check.can_end()) << seed << ": " << r.text;
        }
    }
}

TEST(ConstrainedGenerate, JsonObjectAndSchemaOutputParses) {
    const auto object = Grammar::json_object();
    const auto schema = Grammar::from_json_schema(
        R"({"type":"object","properties":{"id":{"type":"integer"},"ok":{"type":"boolean"},)"
        R"("tags":{"type":"array","items":{"enum":["x","y"]},"maxItems":3}},"required":["id","ok"]})");
    int complete = 0;
    for (uint64_t seed = 0; seed < 20; ++seed) {
        for (const auto& grammar : {object, schema}) {
            const GenerateResult r = run(grammar, seed, 400);
            if (r.stop != StopReason::end_of_generation) continue;  // cut at max_tokens: not a whole document
            ++complete;
            EXPECT_TRUE(grammar_accepts(grammar, r.text)) << r.text;
            nlohmann::json doc;
            ASSERT_NO_THROW(doc = nlohmann::json::parse(r.text)) << seed << ": " << r.text;
            ASSERT_TRUE(doc.is_object());
            if (grammar == schema) {
                EXPECT_TRUE(doc["id"].is_number_integer()) << r.text;
                EXPECT_TRUE(doc["ok"].is_boolean()) << r.text;
                if (doc.contains("tags")) {
                    EXPECT_LE(doc["tags"].size(), 3u) << r.text;
                }
            }
        }
    }
    EXPECT_GE(complete, 20);  // most runs finish their document well within 400 tokens
}

TEST(ConstrainedGenerate, StopsWhenTheGrammarIsComplete) {
    const GenerateResult r = run(Grammar::from_gbnf("root ::= \"ok\""), 1, 50);
    EXPECT_EQ(r.text, "ok");
    EXPECT_EQ(r.stop, StopReason::end_of_generation);
}

TEST(ConstrainedGenerate, AGrammarNoTokenCanFollowIsAnError) {
    // A vocabulary in which only "a" is spelled (every other piece empty): the grammar wants "b".
    auto model = tiny_model();
    std::vector<std::string> pieces(static_cast<size_t>(model->n_vocab()));
    const auto a = model->tokenizer().encode("a", AddSpecial::no, ParseSpecial::no);
    ASSERT_EQ(a.size(), 1u);
    pieces[static_cast<size_t>(a[0])] = "a";
    const auto only_a = GrammarAccess::vocabulary(
        std::make_shared<const grammar::TokenTrie>(pieces, std::vector<uint8_t>{}, std::vector<int32_t>{}));
    GrammarConstraint c(Grammar::from_gbnf("root ::= \"a\" \"b\""), only_a);
    std::vector<float> logits(pieces.size(), 0.0f);
    EXPECT_TRUE(c.mask(logits));
    c.accept(a[0]);
    EXPECT_FALSE(c.mask(logits));

    Evaluator evaluator(model, 1);
    State state(*model, StateOptions{});
    evaluator.eval(state, a);
    Sampler sampler(hot(1));
    GenerateOptions options;
    options.constraint = std::make_shared<GrammarConstraint>(Grammar::from_gbnf("root ::= \"a\" \"b\""), only_a);
    try {
        generate(evaluator, state, sampler, options);
        ADD_FAILURE() << "generate() went on with no allowed token";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("allows no token"), std::string::npos) << e.what();
    }
}

TEST(ConstrainedGenerate, UnconstrainedGenerationIsUntouched) {
    // Without a constraint, generate() samples from the model's logits exactly as a plain loop does:
    // the same tokens, and on_sample sees the same logits bit for bit.
    std::vector<std::vector<float>> seen;
    const GenerateResult r = run(nullptr, 7, 30, &seen);
    auto model = tiny_model();
    Evaluator evaluator(model, 1);
    State state(*model, StateOptions{});
    evaluator.eval(state, model->tokenizer().encode("hi", AddSpecial::no, ParseSpecial::no));
    Sampler sampler(hot(7));
    ASSERT_EQ(seen.size(), r.tokens.size());
    for (size_t i = 0; i < r.tokens.size(); ++i) {
        const auto logits = state.last_logits();
        ASSERT_EQ(std::memcmp(logits.data(), seen[i].data(), logits.size() * sizeof(float)), 0) << i;
        const int32_t token = sampler.sample(logits, state.tokens());
        ASSERT_EQ(token, r.tokens[i]) << i;
        evaluator.eval(state, std::span<const int32_t>(&token, 1));
    }
}

TEST(ConstrainedGenerate, GreedyAndTopKGiveTheFullMaskLoopsTokens) {
    // generate() settles greedy and top-k steps without the whole mask (Sampler::sample_allowed): the
    // tokens and the sampler's final state must be those of a plain loop that masks every step.
    auto model = tiny_model();
    const auto vocabulary = GrammarVocabulary::build(model->tokenizer());
    const auto grammar = Grammar::json_object();
    for (uint64_t seed = 0; seed < 6; ++seed) {
        SamplerParams params;  // the defaults: top-k 40, top-p 0.95, min-p 0.05, temperature 0.8
        params.seed = seed;
        params.temperature = seed % 3 == 0 ? 0.0f : 0.8f + 0.2f * static_cast<float>(seed);
        params.repeat_penalty = seed % 2 == 0 ? 1.0f : 1.3f;
        Evaluator evaluator(model, 1);
        State state(*model, StateOptions{});
        const auto prompt = model->tokenizer().encode("hi", AddSpecial::no, ParseSpecial::no);
        evaluator.eval(state, prompt);
        State reference_state = state.fork();
        Sampler sampler(params);
        GenerateOptions options;
        options.max_tokens = 60;
        options.constraint = std::make_shared<GrammarConstraint>(grammar, vocabulary);
        const GenerateResult r = generate(evaluator, state, sampler, options);

        Sampler reference(params);
        GrammarConstraint constraint(grammar, vocabulary);
        std::vector<int32_t> tokens;
        while (static_cast<int64_t>(tokens.size()) < options.max_tokens && !constraint.must_end()) {
            std::vector<float> masked(reference_state.last_logits().begin(), reference_state.last_logits().end());
            ASSERT_TRUE(constraint.mask(masked));
            const int32_t token = reference.sample(masked, reference_state.tokens());
            constraint.accept(token);
            tokens.push_back(token);
            evaluator.eval(reference_state, std::span<const int32_t>(&token, 1));
            if (model->tokenizer().is_eog(token)) break;
        }
        EXPECT_EQ(r.tokens, tokens) << "seed " << seed;
        EXPECT_EQ(sampler.state().rng, reference.state().rng) << "seed " << seed;
    }
}

TEST(ConstrainedGenerate, MaskedTokensGetMinusInfinityOthersKeepTheirBits) {
    auto model = tiny_model();
    GrammarConstraint c(Grammar::from_gbnf("root ::= \"{\""), GrammarVocabulary::build(model->tokenizer()));
    std::vector<float> logits(static_cast<size_t>(model->n_vocab()) + 3);  // a few ids past the vocabulary
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.001f * static_cast<float>(i) - 0.1f;
    const std::vector<float> before = logits;
    c.mask(logits);
    const auto brace = model->tokenizer().encode("{", AddSpecial::no, ParseSpecial::no);
    ASSERT_EQ(brace.size(), 1u);
    for (size_t i = 0; i < logits.size(); ++i) {
        if (static_cast<int32_t>(i) == brace[0]) {
            EXPECT_EQ(std::memcmp(&logits[i], &before[i], sizeof(float)), 0);
        } else {
            EXPECT_EQ(logits[i], -INFINITY) << i;
        }
    }
}

}  // namespace
}  // namespace kvstash
