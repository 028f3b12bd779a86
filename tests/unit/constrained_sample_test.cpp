// Lazy masking (Sampler::sample_allowed, sample_constrained): asking about single tokens in sampling order
// must give bit for bit what sample() over the fully masked logits gives, the same token and the same RNG
// state, for greedy and top-k sampling with every other filter, penalties and bias, on logits with ties,
// -inf, and NaN/+inf where the mask hides them; and where it cannot decide it must draw nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/constrained_sample.h"
#include "grammar/grammar_access.h"
#include "grammar/grammar_matcher.h"
#include "kvstash/error.h"
#include "kvstash/grammar.h"
#include "kvstash/sampler.h"

namespace kvstash {
namespace {

// Random sampler settings: greedy, top-k with or without top-p / min-p / temperature, penalties, bias;
// one in eight top_k = 0 (the lazy path must decline).
SamplerParams random_params(std::mt19937& rng, int32_t n_vocab) {
    std::uniform_int_distribution<int> pick(0, 7);
    SamplerParams p;
    p.seed = rng();
    p.temperature = pick(rng) < 2 ? (pick(rng) < 4 ? 0.0f : -1.0f) : 0.1f + 0.3f * static_cast<float>(pick(rng));
    const int32_t ks[] = {0, 1, 2, 3, 5, 10, 40, n_vocab + 5};
    p.top_k = ks[pick(rng)];
    p.top_p = pick(rng) < 4 ? 1.0f : 0.3f + 0.1f * static_cast<float>(pick(rng));
    p.min_p = pick(rng) < 4 ? 0.0f : 0.02f * static_cast<float>(pick(rng));
    if (pick(rng) < 3) {
        p.repeat_penalty = 1.0f + 0.2f * static_cast<float>(pick(rng));
        p.repeat_last_n = pick(rng) < 2 ? -1 : 8;
        p.presence_penalty = 0.1f * static_cast<float>(pick(rng));
        p.frequency_penalty = 0.05f * static_cast<float>(pick(rng));
    }
    if (pick(rng) < 2) {
        std::uniform_int_distribution<int32_t> id(0, n_vocab - 1);
        p.logit_bias = {{id(rng), 2.0f}, {id(rng), -INFINITY}, {id(rng), -0.5f}};
    }
    return p;
}

// Logits quantised to a few levels (many ties), some -inf.
std::vector<float> random_logits(std::mt19937& rng, int32_t n_vocab) {
    std::uniform_int_distribution<int> level(0, 12), rare(0, 40);
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    for (float& l : logits) l = rare(rng) == 0 ? -INFINITY : 0.5f * static_cast<float>(level(rng)) - 3.0f;
    return logits;
}

std::vector<float> masked_copy(const std::vector<float>& logits, const std::vector<uint8_t>& allowed) {
    std::vector<float> masked = logits;
    for (size_t i = 0; i < masked.size(); ++i) {
        if (!allowed[i]) masked[i] = -INFINITY;
    }
    return masked;
}

// One draw both ways from samplers in the same state; false when the lazy path declined.
bool compare_one(Sampler& lazy, Sampler& full, const std::vector<float>& logits, const std::vector<uint8_t>& allowed,
                 const std::vector<int32_t>& history, size_t max_asked, const std::string& what) {
    const auto before = lazy.state().rng;
    const std::optional<int32_t> token = lazy.sample_allowed(
        logits, history, [&allowed](int32_t id) { return allowed[static_cast<size_t>(id)] != 0; }, max_asked);
    std::optional<int32_t> expected;
    try {
        expected = full.sample(masked_copy(logits, allowed), history);
    } catch (const Error&) {
        EXPECT_FALSE(token.has_value()) << what << ": the masked path throws, the lazy one gave a token";
        EXPECT_EQ(lazy.state().rng, before) << what;
        return false;
    }
    if (!token) {
        EXPECT_EQ(lazy.state().rng, before) << what << ": declined but drew";
        lazy = Sampler(full.state());  // continue in step
        return false;
    }
    EXPECT_EQ(*token, *expected) << what;
    EXPECT_EQ(lazy.state().rng, full.state().rng) << what;
    return true;
}

TEST(ConstrainedSample, LazyEqualsFullMaskOnRandomLogitsAndSettings) {
    std::mt19937 rng(20261127);
    int decided = 0, cases = 0;
    std::uniform_int_distribution<int> pick(0, 99);
    for (int round = 0; round < 1500; ++round) {
        const int32_t sizes[] = {1, 7, 40, 300, 1100};
        const int32_t n_vocab = sizes[round % 5];
        const SamplerParams params = random_params(rng, n_vocab);
        Sampler lazy(params), full(params);
        // Allowed: dense, sparse or a handful (a grammar state inside a string, after '{', in a number).
        const int density = std::vector<int>{2, 30, 90, 100}[static_cast<size_t>(round % 4)];
        std::vector<int32_t> history;
        for (int step = 0; step < 4; ++step) {
            std::vector<uint8_t> allowed(static_cast<size_t>(n_vocab));
            for (auto& a : allowed) a = pick(rng) < density;
            std::vector<float> logits = random_logits(rng, n_vocab);
            if (pick(rng) < 5) {  // a NaN / +inf where the mask hides it, or where it does not
                const auto i = static_cast<size_t>(pick(rng) % n_vocab);
                logits[i] = pick(rng) < 50 ? NAN : INFINITY;
            }
            const size_t limits[] = {1, 5, 20, 300, 4096};
            const size_t max_asked = limits[static_cast<size_t>(pick(rng) % 5)];
            const std::string what = "round " + std::to_string(round) + " step " + std::to_string(step);
            ++cases;
            if (compare_one(lazy, full, logits, allowed, history, max_asked, what)) ++decided;
            if (HasFailure()) return;
            history.push_back(static_cast<int32_t>(pick(rng) % n_vocab));
        }
    }
    EXPECT_GT(decided, cases / 3);  // the lazy path does decide most greedy / top-k cases
}

TEST(ConstrainedSample, DeclinesTopKZeroAndWhenAskedTooMany) {
    SamplerParams p;
    p.top_k = 0;
    p.seed = 3;
    Sampler s(p);
    const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
    const auto rng = s.state().rng;
    EXPECT_FALSE(s.sample_allowed(logits, {}, [](int32_t) { return true; }).has_value());
    EXPECT_EQ(s.state().rng, rng);
    p.top_k = 2;
    Sampler k(p);
    // Only token 0 (the least likely) is allowed: asking 2 tokens cannot find it; asking 3 can.
    EXPECT_FALSE(k.sample_allowed(
                      logits, {}, [](int32_t id) { return id == 0; }, 2)
                     .has_value());
    EXPECT_EQ(k.sample_allowed(
                  logits, {}, [](int32_t id) { return id == 0; }, 3),
              std::optional<int32_t>(0));
    p.temperature = 0.0f;
    Sampler greedy(p);
    // Ties: the lowest id first, as sample()'s argmax.
    const std::vector<float> tied = {1.0f, 3.0f, 0.5f, 3.0f, 3.0f};
    EXPECT_EQ(greedy.sample_allowed(tied, {}, [](int32_t id) { return id != 1; }), std::optional<int32_t>(3));
    EXPECT_EQ(greedy.sample_allowed(tied, {}, [](int32_t id) { return id < 3 && id != 1; }), std::optional<int32_t>(0));
}

// Tokens: single bytes of a small alphabet and random strings over it (some cut inside "é"), an end token.
std::shared_ptr<const GrammarVocabulary> random_vocabulary(std::mt19937& rng, int n_tokens) {
    static const std::vector<std::string> kAlphabet = {"a", "b",        "{",    "}", "\"", ":",  ",",
                                                       " ", "\xc3\xa9", "\xc3", "1", "-",  "\n", "x"};
    std::vector<std::string> pieces(kAlphabet);
    std::uniform_int_distribution<int> len(2, 6), pick(0, static_cast<int>(kAlphabet.size()) - 1);
    while (static_cast<int>(pieces.size()) < n_tokens) {
        std::string s;
        const int n = len(rng);
        while (static_cast<int>(s.size()) < n) s += kAlphabet[static_cast<size_t>(pick(rng))];
        pieces.push_back(s);
    }
    pieces.push_back("</s>");
    const auto end = static_cast<int32_t>(pieces.size()) - 1;
    return GrammarAccess::vocabulary(
        std::make_shared<const grammar::TokenTrie>(pieces, std::vector<uint8_t>{}, std::vector<int32_t>{end}));
}

// Whole constrained generations with random logits: sample_constrained (lazy, falling back to the mask)
// against mask() + sample() at every step, the two constraints advanced alike.
TEST(ConstrainedSample, GrammarGenerationsMatchTheFullMaskPath) {
    const std::vector<std::string> grammars = {
        "root ::= \"{\" (\"\\\"\" [a-b]{1,5} \"\\\":\" [0-9x]+ (\",\" \" \"?)?)* \"}\"",
        "root ::= (\"- \" [^\\n]{1,12} \"\\n\"){1,4}",
        "root ::= [a-b1é]* \"}\" | \"x\"+ [-]",
        "root ::= \"ab\" | \"a\" \"b\"+ | \"{\" root \"}\"",
    };
    std::mt19937 rng(18);
    int steps = 0, lazy_steps = 0;
    for (int round = 0; round < 300; ++round) {
        // Odd rounds: no shared cache, so `a` does not find the masks `b` computed and takes the lazy path.
        set_grammar_mask_cache_capacity(round % 2 == 1 ? 0 : size_t{64} << 20);
        const auto vocabulary = random_vocabulary(rng, 60 + 40 * (round % 5));
        const auto grammar = Grammar::from_gbnf(grammars[static_cast<size_t>(round) % grammars.size()]);
        const auto n_vocab = GrammarAccess::trie(*vocabulary)->n_vocab();
        const SamplerParams params = random_params(rng, n_vocab);
        Sampler lazy(params), full(params);
        GrammarConstraint a(grammar, vocabulary), b(grammar, vocabulary);
        std::vector<int32_t> history;
        std::vector<float> scratch;
        for (int step = 0; step < 30 && !a.must_end(); ++step) {
            std::vector<float> logits = random_logits(rng, n_vocab);
            std::vector<float> masked = logits;
            const bool any = b.mask(masked);
            const std::string what = "round " + std::to_string(round) + " step " + std::to_string(step);
            std::optional<int32_t> expected;
            bool full_threw = false;
            try {
                if (any) expected = full.sample(masked, history);
            } catch (const Error&) {
                full_threw = true;  // every allowed token banned by the bias
            }
            if (full_threw) {
                EXPECT_THROW(sample_constrained(lazy, a, logits, history, scratch), Error) << what;
                break;
            }
            // The lazy path alone (sample_constrained may take the mask b's steps left in the shared cache).
            Sampler probe(lazy.state());
            const std::optional<int32_t> lazy_token =
                probe.sample_allowed(logits, history, [&a](int32_t id) { return a.allows(id); });
            if (lazy_token) {
                ASSERT_EQ(lazy_token, expected) << what;
                ASSERT_EQ(probe.state().rng, full.state().rng) << what;
                ++lazy_steps;
            }
            const std::optional<int32_t> token = sample_constrained(lazy, a, logits, history, scratch);
            ASSERT_EQ(token, expected) << what;
            ASSERT_EQ(lazy.state().rng, full.state().rng) << what;
            ++steps;
            if (!token) break;
            a.accept(*token);
            b.accept(*token);
            history.push_back(*token);
            if (GrammarAccess::trie(*vocabulary)->is_end_token(*token)) break;
        }
    }
    set_grammar_mask_cache_capacity(size_t{64} << 20);
    std::printf("%d steps, %d settled without the whole mask\n", steps, lazy_steps);
    EXPECT_GT(steps, 1500);
    EXPECT_GT(lazy_steps, steps / 3);
}

}  // namespace
}  // namespace kvstash
