// Speculative decoding changes no bit (kvstash/speculative.h): for each sampler setting, seed and
// drafter, generate() with a drafter gives the same token ids, text, stop reason, the same logits each
// token was sampled from, the same final sampler state and the same saved state file bytes as generate()
// without one. The reference is plain decoding itself (the definition of the promise).
//
// Drafters used: an oracle (proposes plain decoding's own next tokens: every guess accepted, long
// batches), the oracle with every m-th guess wrong (a mismatch at each position of a batch in turn),
// pseudo-random guesses (nearly all rejected), prompt lookup, and a draft model (the same model, and the
// tiny model as a draft for itself). Run on the tiny random-weight model (fast: many settings) and on
// SmolLM2 (a real vocabulary, lookup on a repetitive document).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/grammar.h"
#include "kvstash/model.h"
#include "kvstash/sampler.h"
#include "kvstash/speculative.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "kvstash/tokenizer.h"
#include "support/paths.h"

namespace kvstash {
namespace {

using Ids = std::vector<int32_t>;

std::shared_ptr<const Model> tiny_model() {
    static const auto model = Model::load(test::fixture_path("tiny/gqa_f32.gguf"));
    return model;
}

std::shared_ptr<const Model> smollm() {
    static const auto model = Model::load(test::default_model_path());
    return model;
}

// Proposes plain decoding's own continuation (`expected`: the tokens generated after the sequence the
// first call sees, less its last token); with wrong_every = m > 0, guess number g (counted over all guesses) is wrong
// when g % m == m - 1.
class OracleDrafter final : public Drafter {
public:
    OracleDrafter(Ids expected, int64_t n_vocab, int wrong_every = 0)
        : expected_(std::move(expected)), n_vocab_(n_vocab), wrong_every_(wrong_every) {}
    void propose(std::span<const int32_t> context, int32_t max_tokens, std::vector<int32_t>& draft) override {
        if (prompt_size_ == 0) prompt_size_ = context.size() - 1;  // the first call: the first generated token
        for (size_t i = context.size() - prompt_size_; i < expected_.size() && max_tokens > 0; ++i, --max_tokens) {
            int32_t token = expected_[i];
            if (wrong_every_ > 0 && guesses_ % wrong_every_ == wrong_every_ - 1) {
                token = static_cast<int32_t>((token + 1) % n_vocab_);
            }
            ++guesses_;
            draft.push_back(token);
        }
    }
    const char* name() const override { return "oracle"; }

private:
    Ids expected_;
    size_t prompt_size_ = 0;
    int64_t n_vocab_;
    int wrong_every_;
    int64_t guesses_ = 0;
};

class RandomDrafter final : public Drafter {
public:
    explicit RandomDrafter(int64_t n_vocab) : n_vocab_(n_vocab) {}
    void propose(std::span<const int32_t>, int32_t max_tokens, std::vector<int32_t>& draft) override {
        for (int32_t i = 0; i < max_tokens; ++i) {
            state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
            draft.push_back(static_cast<int32_t>((state_ >> 33) % static_cast<uint64_t>(n_vocab_)));
        }
    }
    const char* name() const override { return "random"; }

private:
    int64_t n_vocab_;
    uint64_t state_ = 7;
};

std::string file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Outcome {
    GenerateResult result;
    std::vector<std::vector<float>> logits;  // what each token was sampled from
    std::vector<std::string> pieces;         // the callback's pieces
    SamplerState sampler;
    std::string saved;  // the state file's bytes
};

struct RunSetup {
    std::shared_ptr<const Model> model;
    std::string prompt;
    SamplerParams params;
    GenerateOptions options;                          // drafter / constraint set per run
    std::shared_ptr<const Grammar> grammar;           // a fresh constraint per run
    std::function<void(State&, const Ids&)> prefill;  // how the prompt is evaluated (default: one eval)
    std::function<State(State&)> prepare;             // e.g. fork or save + load; default: the state itself
    int callback_stop_after = -1;                     // the callback returns false on this call (1-based)
};

Outcome run(const RunSetup& setup, std::shared_ptr<Drafter> drafter) {
    Evaluator evaluator(setup.model, 1);
    State original(*setup.model, StateOptions{.n_ctx = 512});
    const Ids prompt = setup.model->tokenizer().encode(setup.prompt, AddSpecial::no, ParseSpecial::no);
    if (setup.prefill) {
        setup.prefill(original, prompt);
    } else {
        evaluator.eval(original, prompt);
    }
    State state = setup.prepare ? setup.prepare(original) : std::move(original);
    Sampler sampler(setup.params);
    GenerateOptions options = setup.options;
    options.drafter = std::move(drafter);
    Outcome out;
    options.on_sample = [&out](std::span<const float> l, int32_t) { out.logits.emplace_back(l.begin(), l.end()); };
    if (setup.grammar) {
        static const auto vocabulary = GrammarVocabulary::build(tiny_model()->tokenizer());
        static const auto smol_vocabulary = GrammarVocabulary::build(smollm()->tokenizer());
        options.constraint = std::make_shared<GrammarConstraint>(
            setup.grammar, setup.model == tiny_model() ? vocabulary : smol_vocabulary);
    }
    int calls = 0;
    out.result = generate(evaluator, state, sampler, options, [&](int32_t, std::string_view piece) {
        out.pieces.emplace_back(piece);
        return setup.callback_stop_after < 0 || ++calls < setup.callback_stop_after;
    });
    out.sampler = sampler.state();
    const std::string path =
        (std::filesystem::temp_directory_path() / ("kvstash_spec_" + std::to_string(::getpid()) + ".kvs")).string();
    save_state(state, path);
    out.saved = file_bytes(path);
    std::filesystem::remove(path);
    return out;
}

void expect_identical(const Outcome& plain, const Outcome& spec, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(plain.result.tokens, spec.result.tokens);
    EXPECT_EQ(plain.result.text, spec.result.text);
    EXPECT_EQ(plain.result.stop, spec.result.stop);
    EXPECT_EQ(plain.pieces, spec.pieces);
    ASSERT_EQ(plain.logits.size(), spec.logits.size());
    for (size_t i = 0; i < plain.logits.size(); ++i) {
        ASSERT_EQ(plain.logits[i].size(), spec.logits[i].size());
        ASSERT_EQ(0, std::memcmp(plain.logits[i].data(), spec.logits[i].data(), plain.logits[i].size() * sizeof(float)))
            << "logits of token " << i << " differ";
    }
    EXPECT_EQ(plain.sampler.rng, spec.sampler.rng);
    EXPECT_TRUE(plain.saved == spec.saved) << "the saved state files differ";
}

// Plain decoding, then each drafter: all identical to plain. Returns the drafters' outcomes.
std::vector<Outcome> check_all_drafters(const RunSetup& setup, bool with_model_drafter = true) {
    const Outcome plain = run(setup, nullptr);
    const int64_t n_vocab = setup.model->info().n_vocab;
    std::vector<std::pair<std::string, std::shared_ptr<Drafter>>> drafters = {
        {"oracle", std::make_shared<OracleDrafter>(plain.result.tokens, n_vocab)},
        {"oracle, every 3rd wrong", std::make_shared<OracleDrafter>(plain.result.tokens, n_vocab, 3)},
        {"oracle, every 5th wrong", std::make_shared<OracleDrafter>(plain.result.tokens, n_vocab, 5)},
        {"random", std::make_shared<RandomDrafter>(n_vocab)},
        {"lookup", make_lookup_drafter()},
    };
    if (with_model_drafter) {
        drafters.emplace_back("draft model", make_model_drafter(setup.model, *setup.model, {.n_threads = 1}));
    }
    std::vector<Outcome> outcomes;
    for (auto& [name, drafter] : drafters) {
        outcomes.push_back(run(setup, drafter));
        expect_identical(plain, outcomes.back(), name);
    }
    EXPECT_EQ(outcomes[0].result.accepted, outcomes[0].result.drafted) << "the oracle's guesses are all right";
    if (plain.result.tokens.size() >= 8) {  // enough rounds for guesses to be made and some to be wrong
        EXPECT_GT(outcomes[0].result.accepted, 0);
        EXPECT_LT(outcomes[1].result.accepted, outcomes[1].result.drafted);
    }
    return outcomes;
}

SamplerParams seeded(uint64_t seed, float temperature, int32_t top_k, float top_p, float min_p) {
    SamplerParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    return p;
}

RunSetup tiny_setup(SamplerParams params, int64_t max_tokens = 40) {
    RunSetup s;
    s.model = tiny_model();
    s.prompt = "hello there, hello there";
    s.params = std::move(params);
    s.options.max_tokens = max_tokens;
    s.options.speculation.max_draft = 6;
    return s;
}

TEST(SpeculativeGenerate, GreedyIsIdentical) { check_all_drafters(tiny_setup(seeded(1, 0.0f, 40, 0.95f, 0.05f))); }

TEST(SpeculativeGenerate, SeededSamplingIsIdenticalForEverySetting) {
    for (uint64_t seed : {1u, 2u, 3u}) {
        check_all_drafters(tiny_setup(seeded(seed, 0.8f, 40, 0.95f, 0.05f)));
        check_all_drafters(tiny_setup(seeded(seed, 1.3f, 0, 1.0f, 0.0f)), false);
        check_all_drafters(tiny_setup(seeded(seed, 0.6f, 5, 0.8f, 0.1f)), false);
    }
}

TEST(SpeculativeGenerate, PenaltiesAndLogitBiasAreIdentical) {
    SamplerParams p = seeded(11, 0.9f, 20, 0.9f, 0.02f);
    p.repeat_penalty = 1.3f;
    p.repeat_last_n = 16;
    p.frequency_penalty = 0.4f;
    p.presence_penalty = 0.3f;
    p.logit_bias = {{5, 3.0f}, {17, -INFINITY}, {40, 1.5f}};
    check_all_drafters(tiny_setup(p));
    SamplerParams whole = p;
    whole.repeat_last_n = -1;
    whole.temperature = 0.0f;
    check_all_drafters(tiny_setup(whole), false);
}

TEST(SpeculativeGenerate, GrammarConstraintsAreIdentical) {
    for (uint64_t seed : {4u, 5u}) {
        RunSetup s = tiny_setup(seeded(seed, 1.2f, 0, 1.0f, 0.0f), 60);
        s.grammar = Grammar::from_json_schema(
            R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"n":{"type":"integer"}},)"
            R"("required":["name","n"]})");
        check_all_drafters(s, false);
        s.grammar = Grammar::from_gbnf("root ::= (\"yes\" | \"no\" | [0-9]{1,3}) (\", \" [a-c]+)*\n");
        check_all_drafters(s, false);
    }
}

TEST(SpeculativeGenerate, StopStringsMaxTokensAndCallbackStopsAreIdentical) {
    // A stop string, max_tokens and a callback stop ending generation in the middle of a verified batch:
    // the state is cut back to the last verified token with its own logits.
    RunSetup s = tiny_setup(seeded(8, 0.0f, 40, 0.95f, 0.05f), 40);
    const Outcome plain = run(s, nullptr);
    ASSERT_GE(plain.result.text.size(), 12u);
    s.options.stop_strings = {plain.result.text.substr(8, 3)};
    check_all_drafters(s, false);
    s.options.stop_strings.clear();
    for (int64_t max_tokens : {1, 2, 7, 13}) {
        s.options.max_tokens = max_tokens;
        check_all_drafters(s, false);
    }
    s.options.max_tokens = 40;
    for (int stop_after : {1, 3, 6}) {
        s.callback_stop_after = stop_after;
        check_all_drafters(s, false);
    }
}

TEST(SpeculativeGenerate, NearAFullContextIsIdentical) {
    RunSetup s = tiny_setup(seeded(9, 0.7f, 40, 0.95f, 0.05f), 1000);  // the 512-token context ends it
    check_all_drafters(s, false);
}

TEST(SpeculativeGenerate, ChunkedRestoredAndForkedStatesAreIdentical) {
    RunSetup s = tiny_setup(seeded(21, 0.8f, 40, 0.95f, 0.05f));
    const Outcome reference = run(s, nullptr);
    s.prefill = [&s](State& state, const Ids& prompt) {
        Evaluator evaluator(s.model, 2);
        for (size_t i = 0; i < prompt.size(); i += 3) {
            evaluator.eval(state, std::span<const int32_t>(prompt).subspan(i, std::min<size_t>(3, prompt.size() - i)));
        }
    };
    for (const Outcome& o : check_all_drafters(s, false)) expect_identical(reference, o, "chunked prefill");
    s.prefill = nullptr;
    s.prepare = [](State& state) { return state.fork(); };
    for (const Outcome& o : check_all_drafters(s, false)) expect_identical(reference, o, "fork");
    s.prepare = [&s](State& state) {
        const std::string path =
            (std::filesystem::temp_directory_path() / ("kvstash_spec_restore_" + std::to_string(::getpid()) + ".kvs"))
                .string();
        save_state(state, path);
        State loaded = load_state(*s.model, path);
        std::filesystem::remove(path);
        return loaded;
    };
    for (const Outcome& o : check_all_drafters(s, false)) expect_identical(reference, o, "restored");
}

TEST(SpeculativeGenerate, ContinuingAfterASpeculativeRunIsIdentical) {
    // Two generate() calls in a row (a chat's turns): the second starts from the state the first left.
    RunSetup s = tiny_setup(seeded(31, 0.0f, 40, 0.95f, 0.05f), 9);
    s.prepare = [&s](State& state) {
        Evaluator evaluator(s.model, 1);
        Sampler sampler(s.params);
        GenerateOptions first;
        first.max_tokens = 11;
        first.drafter = make_lookup_drafter();
        generate(evaluator, state, sampler, first);
        return std::move(state);
    };
    const Outcome reference = run(s, nullptr);  // the first call speculative: the second plain ...
    check_all_drafters(s, false);               // ... and each drafter: all as if no call speculated
    RunSetup plain_first = s;
    plain_first.prepare = [&s](State& state) {
        Evaluator evaluator(s.model, 1);
        Sampler sampler(s.params);
        GenerateOptions first;
        first.max_tokens = 11;
        generate(evaluator, state, sampler, first);
        return std::move(state);
    };
    expect_identical(run(plain_first, nullptr), reference, "first call plain");
}

TEST(SpeculativeGenerate, LookupOnARealModelIsIdenticalAndAccepts) {
    // SmolLM2 asked to repeat a sentence: prompt lookup's guesses are mostly right.
    RunSetup s;
    s.model = smollm();
    s.prompt =
        "<|im_start|>user\nRepeat exactly: The quick brown fox jumps over the lazy dog near the river bank at "
        "dawn.<|im_end|>\n<|im_start|>assistant\n";
    s.params = seeded(3, 0.0f, 40, 0.95f, 0.05f);
    s.options.max_tokens = 24;
    s.options.speculation.max_draft = 8;
    const Outcome plain = run(s, nullptr);
    const Outcome lookup = run(s, make_lookup_drafter());
    expect_identical(plain, lookup, "lookup, greedy");
    EXPECT_GT(lookup.result.accepted, 0) << plain.result.text;
    s.params = seeded(3, 0.7f, 40, 0.95f, 0.05f);
    expect_identical(run(s, nullptr), run(s, make_lookup_drafter()), "lookup, sampled");
}

TEST(SpeculativeGenerate, LookupProposesWhatFollowedTheLatestMatch) {
    auto lookup = make_lookup_drafter({.max_ngram = 3, .min_ngram = 2});
    std::vector<int32_t> draft;
    lookup->propose(Ids{1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3}, 3, draft);
    EXPECT_EQ(draft, (Ids{4, 5, 9}));  // the 3-gram "1 2 3" (at 0) wins over the later 2-gram "2 3" (at 6)
    draft.clear();
    lookup->propose(Ids{1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 6, 2, 3}, 3, draft);
    EXPECT_EQ(draft, (Ids{7, 8, 6}));  // no earlier "6 2 3": the latest "2 3" (at 6, not the one at 1)
    draft.clear();
    lookup->propose(Ids{1, 2, 3}, 3, draft);
    EXPECT_TRUE(draft.empty());
    draft.clear();
    lookup->propose(Ids{7}, 3, draft);
    EXPECT_TRUE(draft.empty());
    draft = {42};  // guesses are appended
    lookup->propose(Ids{1, 2, 3, 4, 1, 2}, 2, draft);
    EXPECT_EQ(draft, (Ids{42, 3, 4}));
}

TEST(SpeculativeGenerate, LookupPrefersTheLongestMatchUpToMaxNgram) {
    // "4 1 2" occurred at 0 and "9 1 2" at 6; the suffix "4 1 2" is 3 long at 0 but 2 long at 6: 0 wins.
    const Ids context{4, 1, 2, 5, 5, 5, 9, 1, 2, 6, 6, 6, 4, 1, 2};
    std::vector<int32_t> draft;
    make_lookup_drafter({.max_ngram = 16, .min_ngram = 2})->propose(context, 3, draft);
    EXPECT_EQ(draft, (Ids{5, 5, 5}));
    draft.clear();
    // With max_ngram 2 both are 2-grams: the latest (at 6) wins.
    make_lookup_drafter({.max_ngram = 2, .min_ngram = 2})->propose(context, 3, draft);
    EXPECT_EQ(draft, (Ids{6, 6, 6}));
}

TEST(SpeculativeGenerate, LookupContinuesARepetitionPastTheEndOfTheContext) {
    // "5 6" repeating: the latest earlier "5 6" ends 2 tokens back; what followed it is copied on from the
    // guesses themselves (period 2), max_tokens long, not only the 2 tokens the context holds after it.
    auto lookup = make_lookup_drafter({.max_ngram = 3, .min_ngram = 2});
    std::vector<int32_t> draft;
    lookup->propose(Ids{5, 6, 5, 6}, 8, draft);
    EXPECT_EQ(draft, (Ids{5, 6, 5, 6, 5, 6, 5, 6}));
    draft.clear();
    lookup->propose(Ids{0, 1, 2, 3, 1, 2, 3, 1, 2}, 7, draft);  // period 3
    EXPECT_EQ(draft, (Ids{3, 1, 2, 3, 1, 2, 3}));
    draft.clear();
    lookup->propose(Ids{8, 8, 8}, 4, draft);  // period 1
    EXPECT_EQ(draft, (Ids{8, 8, 8, 8}));
}

TEST(SpeculativeGenerate, SelfSpeculationWithALowerBitCopyIsIdentical) {
    // A Hugging Face directory loaded twice: as it is (the target) and quantized to q4_K (the drafter).
    const auto target = Model::load(test::fixture_path("hf/llama_f32"));
    RunSetup s;
    s.model = target;
    s.prompt = "Hi there, hi there";
    s.params = seeded(2, 0.8f, 40, 0.95f, 0.05f);
    s.options.max_tokens = 24;
    const Outcome plain = run(s, nullptr);
    const auto lower_bit = Model::load(test::fixture_path("hf/llama_f32"), {.quantize = LoadQuantization::q4_K});
    const Outcome self = run(s, make_model_drafter(lower_bit, *target, {.n_threads = 1}));
    expect_identical(plain, self, "self-speculation");
    EXPECT_GT(self.result.drafted, 0);
}

TEST(SpeculativeGenerate, RecurrentStatesAreRefusedByName) {
    // Sliding-window states (Gemma 3) are not refused: tests/parity/gemma3_speculative_test.cpp.
    for (const char* fixture : {"recurrent/granitehybrid_f32.gguf"}) {
        SCOPED_TRACE(fixture);
        const auto model = Model::load(test::fixture_path(fixture));
        Evaluator evaluator(model, 1);
        State state(*model, StateOptions{.n_ctx = 256});
        evaluator.eval(state, Ids{1, 2, 3});
        Sampler sampler(seeded(1, 0.0f, 40, 0.95f, 0.05f));
        GenerateOptions options;
        options.max_tokens = 4;
        options.drafter = make_lookup_drafter();
        try {
            generate(evaluator, state, sampler, options);
            ADD_FAILURE() << "speculation was not refused";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::unsupported);
            EXPECT_NE(std::string(e.what()).find("speculative decoding is not offered"), std::string::npos) << e.what();
        }
        EXPECT_EQ(state.n_tokens(), 3) << "nothing was generated";
    }
}

TEST(SpeculativeGenerate, BadOptionsAreErrors) {
    RunSetup s = tiny_setup(seeded(1, 0.0f, 40, 0.95f, 0.05f));
    s.options.speculation.max_draft = 0;
    EXPECT_THROW(run(s, make_lookup_drafter()), Error);
    s.options.speculation.max_draft = 4;
    s.options.speculation.min_draft = 5;
    EXPECT_THROW(run(s, make_lookup_drafter()), Error);
    EXPECT_THROW(make_lookup_drafter({.max_ngram = 1, .min_ngram = 2}), Error);
    EXPECT_THROW(make_model_drafter(smollm(), *tiny_model()), Error);  // other vocabulary
}

}  // namespace
}  // namespace kvstash
