// The generation loop: stop conditions, streaming (UTF-8 and stop-string hold-back), the state it
// leaves behind, on the default model (SmolLM2: byte-level vocabulary with a token for each single
// byte it uses). Token sequences are forced through logit_bias (and penalties) where the expectation
// must follow from the definitions rather than from what the model happens to say.
// (The tiny fixtures cannot be used: their tokenizer.ggml.pre is "gpt-2", which the tokenizer does
// not accept yet.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
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

using Ids = std::vector<int32_t>;
using test::default_model_path;

std::shared_ptr<const Model> default_model() {
    // Loaded once for the whole test program.
    static const auto model = Model::load(default_model_path());
    return model;
}

// Records every callback call.
struct Recorder {
    std::vector<std::string> pieces;
    std::vector<int32_t> tokens;
    int stop_after = -1;  // return false on this call (1-based); -1: never
    TokenCallback callback() {
        return [this](int32_t token, std::string_view text) {
            pieces.emplace_back(text);
            tokens.push_back(token);
            return stop_after < 0 || static_cast<int>(pieces.size()) < stop_after;
        };
    }
    std::string joined() const {
        std::string s;
        for (const auto& p : pieces) s += p;
        return s;
    }
};

// The id whose piece is exactly `bytes`.
int32_t token_for(const Tokenizer& tok, const std::string& bytes) {
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        if (tok.token_piece(id) == bytes) return id;
    }
    ADD_FAILURE() << "no token for the given bytes";
    return 0;
}

SamplerParams sampling(uint64_t seed) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

// Greedy parameters that make the loop emit `sequence` over and over: every other token banned, the
// sequence's tokens biased in decreasing order, and a frequency penalty larger than the bias spread,
// so the next token is always the least used one, earliest in the sequence on ties.
SamplerParams forced_cycle(const Tokenizer& tok, const Ids& sequence) {
    SamplerParams p;
    p.temperature = 0.0f;
    p.repeat_last_n = -1;
    p.frequency_penalty = 1.0e5f;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) p.logit_bias.emplace_back(id, -INFINITY);
    for (size_t i = 0; i < sequence.size(); ++i) {
        p.logit_bias[static_cast<size_t>(sequence[i])].second = 1000.0f * static_cast<float>(sequence.size() - i);
    }
    return p;
}

// ---------------------------------------------------------------------------------------------
// Stop conditions, streaming, state

// SmolLM2, a two-thread evaluator and a short prompt. SetUp fails without the model (or skips, see
// paths.h), which skips the test body.
class Generate : public ::testing::Test {
protected:
    std::shared_ptr<const Model> model;
    const Tokenizer* tokenizer = nullptr;
    std::unique_ptr<Evaluator> evaluator_ptr;
    Ids prompt;

    void SetUp() override {
        KVSTASH_REQUIRE_DEFAULT_MODEL();
        model = default_model();
        tokenizer = &model->tokenizer();
        evaluator_ptr = std::make_unique<Evaluator>(model, 2);
        prompt = tokenizer->encode("The capital of France is", AddSpecial::no, ParseSpecial::no);
    }
    const Tokenizer& tok() const { return *tokenizer; }
    Evaluator& evaluator() { return *evaluator_ptr; }
    int64_t n_prompt() const { return static_cast<int64_t>(prompt.size()); }

    State prefilled(StateOptions options = {}) {
        State state(*model, options);
        evaluator().eval(state, prompt);
        return state;
    }
    GenerateResult run(State& state, Sampler& sampler, const GenerateOptions& options, Recorder* rec = nullptr) {
        return generate(evaluator(), state, sampler, options, rec ? rec->callback() : TokenCallback{});
    }
    // Sampling at temperature 1 with the end-of-text token banned, so runs last max_tokens.
    SamplerParams sampling_without_eos(uint64_t seed) const {
        SamplerParams p = sampling(seed);
        p.logit_bias = {{tok().eos(), -INFINITY}};
        return p;
    }
    // Greedy from `text`, never stopping at EOG.
    GenerateResult greedy(const std::string& text, int64_t max_tokens, const std::vector<std::string>& stops,
                          Recorder& rec) {
        State state(*model);
        evaluator().eval(state, tok().encode(text, AddSpecial::no, ParseSpecial::no));
        SamplerParams p;
        p.temperature = 0.0f;
        Sampler sampler(p);
        GenerateOptions options;
        options.max_tokens = max_tokens;
        options.stop_strings = stops;
        options.stop_at_end_of_generation = false;
        return run(state, sampler, options, &rec);
    }
};

TEST_F(Generate, MultiByteCharactersAreNeverSplitAcrossPieces) {
    // "€" = E2 82 AC and "😀" = F0 9F 98 80, forced one byte-token at a time: every token but a
    // character's last is a lone lead or continuation byte.
    const std::string euro = "\xE2\x82\xAC", smile = "\xF0\x9F\x98\x80";
    Ids cycle;
    for (char b : euro + smile) cycle.push_back(token_for(tok(), std::string(1, b)));
    Sampler sampler(forced_cycle(tok(), cycle));
    State state = prefilled();
    Recorder rec;
    GenerateOptions options;
    options.max_tokens = 3 * 7 + 2;  // ends inside a "€": the last piece is the flushed incomplete tail
    const auto result = run(state, sampler, options, &rec);

    Ids expected_tokens;
    for (int i = 0; i < 3; ++i) expected_tokens.insert(expected_tokens.end(), cycle.begin(), cycle.end());
    expected_tokens.push_back(cycle[0]);
    expected_tokens.push_back(cycle[1]);
    EXPECT_EQ(result.tokens, expected_tokens);
    EXPECT_EQ(result.stop, StopReason::max_tokens);
    EXPECT_EQ(result.text, euro + smile + euro + smile + euro + smile + "\xE2\x82");
    // One piece per character, passed with the token that completes it; then the flush.
    EXPECT_EQ(rec.pieces, (std::vector<std::string>{euro, smile, euro, smile, euro, smile, "\xE2\x82"}));
    EXPECT_EQ(rec.tokens, (Ids{cycle[2], cycle[6], cycle[2], cycle[6], cycle[2], cycle[6], cycle[1]}));
    EXPECT_EQ(rec.joined(), result.text);
}

TEST_F(Generate, EndOfGenerationStops) {
    const Ids end_of_turn = tok().encode("<|im_end|>", AddSpecial::no, ParseSpecial::yes);
    ASSERT_EQ(end_of_turn.size(), 1u);
    ASSERT_TRUE(tok().is_eog(end_of_turn[0]));
    SamplerParams p = sampling(3);
    p.logit_bias = {{end_of_turn[0], 1000.0f}};
    {
        Sampler sampler(p);
        State state = prefilled();
        Recorder rec;
        const auto result = run(state, sampler, {}, &rec);
        EXPECT_EQ(result.stop, StopReason::end_of_generation);
        EXPECT_EQ(result.tokens, end_of_turn);
        EXPECT_EQ(result.text, "");
        EXPECT_TRUE(rec.pieces.empty());
        EXPECT_EQ(state.n_tokens(), n_prompt() + 1);  // the EOG token was evaluated too
        EXPECT_EQ(state.tokens().back(), end_of_turn[0]);
    }
    {
        // Not stopping: EOG tokens are generated but contribute no text.
        Sampler sampler(p);
        State state = prefilled();
        GenerateOptions options;
        options.stop_at_end_of_generation = false;
        options.max_tokens = 3;
        const auto result = run(state, sampler, options);
        EXPECT_EQ(result.stop, StopReason::max_tokens);
        EXPECT_EQ(result.tokens, (Ids{end_of_turn[0], end_of_turn[0], end_of_turn[0]}));
        EXPECT_EQ(result.text, "");
    }
}

TEST_F(Generate, MaxTokensHonoured) {
    Sampler sampler(sampling_without_eos(11));
    State state = prefilled();
    GenerateOptions options;
    options.max_tokens = 10;
    Recorder rec;
    const auto result = run(state, sampler, options, &rec);
    EXPECT_EQ(result.stop, StopReason::max_tokens);
    EXPECT_EQ(result.tokens.size(), 10u);
    EXPECT_EQ(state.n_tokens(), n_prompt() + 10);
    EXPECT_EQ(rec.joined(), result.text);
    EXPECT_EQ(result.text, tok().decode(result.tokens));
    EXPECT_GT(result.seconds, 0.0);

    options.max_tokens = 0;
    const SamplerState before = sampler.state();
    const auto none = run(state, sampler, options);
    EXPECT_EQ(none.stop, StopReason::max_tokens);
    EXPECT_TRUE(none.tokens.empty());
    EXPECT_EQ(state.n_tokens(), n_prompt() + 10);
    EXPECT_EQ(sampler.state().rng, before.rng);
}

TEST_F(Generate, CallbackFalseStops) {
    // Only single lowercase letters allowed, so every token yields a piece at once.
    SamplerParams p = sampling(5);
    for (int32_t id = 0; id < tok().n_vocab(); ++id) {
        const std::string piece = tok().token_piece(id);
        if (!(piece.size() == 1 && piece[0] >= 'a' && piece[0] <= 'z')) p.logit_bias.emplace_back(id, -INFINITY);
    }
    Sampler sampler(p);
    State state = prefilled();
    Recorder rec;
    rec.stop_after = 3;
    GenerateOptions options;
    options.max_tokens = 50;
    const auto result = run(state, sampler, options, &rec);
    EXPECT_EQ(result.stop, StopReason::callback);
    EXPECT_EQ(rec.pieces.size(), 3u);  // not called again after returning false
    EXPECT_EQ(result.tokens.size(), 3u);
    EXPECT_EQ(rec.joined(), result.text);
    EXPECT_EQ(state.n_tokens(), n_prompt() + 3);
}

TEST_F(Generate, ContextFullStopsWithoutEvaluating) {
    Sampler sampler(sampling_without_eos(8));
    StateOptions small;
    small.n_ctx = n_prompt() + 5;
    State state = prefilled(small);
    GenerateOptions options;
    options.max_tokens = 100;
    const auto result = run(state, sampler, options);
    EXPECT_EQ(result.stop, StopReason::context_full);
    EXPECT_EQ(result.tokens.size(), 5u);
    EXPECT_EQ(state.n_tokens(), n_prompt() + 5);
    const SamplerState before = sampler.state();
    const auto again = run(state, sampler, options);
    EXPECT_EQ(again.stop, StopReason::context_full);
    EXPECT_TRUE(again.tokens.empty());
    EXPECT_EQ(sampler.state().rng, before.rng) << "nothing sampled that could not be evaluated";
}

TEST_F(Generate, StateHoldsTheSequenceAndItsExactLogits) {
    SamplerParams p = sampling_without_eos(21);
    p.top_k = 20;
    Sampler sampler(p);
    State state = prefilled();
    GenerateOptions options;
    options.max_tokens = 24;
    const auto result = run(state, sampler, options);
    ASSERT_EQ(result.tokens.size(), 24u);

    Ids all = prompt;
    all.insert(all.end(), result.tokens.begin(), result.tokens.end());
    EXPECT_EQ(Ids(state.tokens().begin(), state.tokens().end()), all);
    State fresh(*model);
    Evaluator other(model, 1);
    other.eval(fresh, all);  // one pass over everything, another thread count
    ASSERT_EQ(fresh.last_logits().size(), state.last_logits().size());
    EXPECT_EQ(
        std::memcmp(fresh.last_logits().data(), state.last_logits().data(), state.last_logits().size() * sizeof(float)),
        0);
    ASSERT_NE(state.sampler_state(), nullptr);
    EXPECT_EQ(state.sampler_state()->rng, sampler.state().rng);
    EXPECT_EQ(state.sampler_state()->params.seed, 21u);
}

TEST_F(Generate, ContinuingFromTheStoredSamplerStateEqualsOneRun) {
    SamplerParams p = sampling_without_eos(31);
    p.repeat_penalty = 1.2f;
    GenerateOptions options;
    options.max_tokens = 16;
    Sampler whole(p);
    State one = prefilled();
    const auto all = run(one, whole, options);

    options.max_tokens = 7;
    Sampler first(p);
    State two = prefilled();
    auto part1 = run(two, first, options);
    State saved = two.fork();  // as if saved and loaded elsewhere
    Sampler resumed(*saved.sampler_state());
    options.max_tokens = 9;
    const auto part2 = run(saved, resumed, options);
    part1.tokens.insert(part1.tokens.end(), part2.tokens.begin(), part2.tokens.end());
    EXPECT_EQ(part1.tokens, all.tokens);
    // Not vacuous: restarting the seed instead diverges.
    Sampler restarted(p);
    State three = two.fork();
    const auto wrong = run(three, restarted, options);
    EXPECT_NE(wrong.tokens, part2.tokens);
}

TEST_F(Generate, Validation) {
    Sampler sampler(sampling(1));
    State empty(*model);
    EXPECT_THROW(run(empty, sampler, {}), Error);
    State state = prefilled();
    GenerateOptions negative;
    negative.max_tokens = -1;
    EXPECT_THROW(run(state, sampler, negative), Error);
    GenerateOptions empty_stop;
    empty_stop.stop_strings = {"x", ""};
    EXPECT_THROW(run(state, sampler, empty_stop), Error);
    EXPECT_EQ(state.n_tokens(), n_prompt());
    EXPECT_STREQ(stop_reason_name(StopReason::stop_string), "stop_string");
    EXPECT_STREQ(stop_reason_name(StopReason::context_full), "context_full");
}

TEST_F(Generate, ErrorsLeaveTheStateConsistent) {
    Sampler sampler(sampling_without_eos(2));
    State state = prefilled();
    GenerateOptions options;
    options.max_tokens = 20;
    int calls = 0;
    EXPECT_THROW(generate(evaluator(), state, sampler, options,
                          [&](int32_t, std::string_view) -> bool {
                              if (++calls == 2) throw std::runtime_error("callback failed");
                              return true;
                          }),
                 std::runtime_error);
    EXPECT_GE(state.n_tokens(), n_prompt() + 2);
    ASSERT_NE(state.sampler_state(), nullptr);
    EXPECT_EQ(state.sampler_state()->rng, sampler.state().rng);
}

TEST_F(Generate, StopStringsCutTheTextAndAreNeverStreamed) {
    const std::string text_prompt = "Once upon a time, in a small village,";
    Recorder ref_rec;
    const auto reference = greedy(text_prompt, 40, {}, ref_rec);
    const std::string& text = reference.text;
    ASSERT_EQ(ref_rec.joined(), text);

    // A stop string straddling a token boundary (its first two bytes end one token, the rest start
    // the next), occurring there for the first time: without hold-back those two bytes would be
    // streamed before the stop string is known.
    std::string stop;
    size_t boundary = 0, cut = std::string::npos;
    for (size_t i = 0; i + 1 < reference.tokens.size() && cut == std::string::npos; ++i) {
        boundary += tok().token_piece(reference.tokens[i]).size();
        if (i < 8 || boundary + 3 > text.size()) continue;
        const std::string candidate = text.substr(boundary - 2, 5);
        if (text.find(candidate) == boundary - 2) {
            stop = candidate;
            cut = boundary - 2;
        }
    }
    ASSERT_NE(cut, std::string::npos) << "no usable token boundary in: " << text;

    Recorder rec;
    const auto stopped = greedy(text_prompt, 40, {"never here \x01", stop}, rec);
    EXPECT_EQ(stopped.stop, StopReason::stop_string);
    EXPECT_EQ(stopped.text, text.substr(0, cut));
    EXPECT_EQ(rec.joined(), stopped.text);
    // The tokens up to and including the one that completed the stop string.
    ASSERT_LE(stopped.tokens.size(), reference.tokens.size());
    EXPECT_TRUE(std::equal(stopped.tokens.begin(), stopped.tokens.end(), reference.tokens.begin()));
    EXPECT_GE(tok().decode(stopped.tokens).size(), cut + stop.size());
    const Ids without_last(stopped.tokens.begin(), stopped.tokens.end() - 1);
    EXPECT_LT(tok().decode(without_last).size(), cut + stop.size());

    // Several stop strings: the earliest occurrence wins, whatever the list order.
    const std::string later = text.substr(cut + 3, 4), earlier = text.substr(cut - 6, 3);
    ASSERT_EQ(text.find(earlier), cut - 6) << "pick another offset for this text: " << text;
    Recorder rec_both;
    const auto both = greedy(text_prompt, 40, {later, earlier}, rec_both);
    EXPECT_EQ(both.text, text.substr(0, cut - 6));
    EXPECT_EQ(rec_both.joined(), both.text);

    // A stop string whose start occurs but which never completes: held back, then released.
    Recorder rec_released;
    const auto released = greedy(text_prompt, 40, {stop.substr(0, 3) + "\x01"}, rec_released);
    EXPECT_EQ(released.stop, StopReason::max_tokens);
    EXPECT_EQ(released.text, text);
    EXPECT_EQ(rec_released.joined(), text);
}

}  // namespace
}  // namespace kvstash
