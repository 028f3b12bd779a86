// Sampler and Rng on small hand-made logit vectors: expected values follow from the definitions in
// sampler.h worked out by hand (in the comments) or from the published xoshiro256** / splitmix64
// algorithms, never from the implementation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "engine/rng.h"
#include "kvstash/error.h"
#include "kvstash/sampler.h"

namespace kvstash {
namespace {

using Ids = std::vector<int32_t>;
using Logits = std::vector<float>;

// Filters off, plain softmax at temperature t.
SamplerParams plain(float temperature, uint64_t seed = 1) {
    SamplerParams p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

Ids draw(Sampler& sampler, const Logits& logits, int n, const Ids& history = {}) {
    Ids out;
    for (int i = 0; i < n; ++i) out.push_back(sampler.sample(logits, history));
    return out;
}

Ids kept_ids(const std::vector<TokenProbability>& dist) {
    Ids ids;
    for (const auto& t : dist) ids.push_back(t.id);
    return ids;
}

// Logits whose softmax (temperature 1) is exactly proportional to `probs`.
Logits log_of(const std::vector<double>& probs) {
    Logits l;
    for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
    return l;
}

// ---------------------------------------------------------------------------------------------
// Rng

// Expected values: a Python transcription of the published C sources (prng.di.unimi.it/splitmix64.c and
// xoshiro256starstar.c), run once; 0xe220a8397b1dcdaf is splitmix64(0)'s widely quoted first output.
TEST(Rng, SplitMix64Seeding) {
    EXPECT_EQ(Rng::seed_state(0), (Rng::StateWords{0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull, 0x06c45d188009454full,
                                                   0xf88bb8a8724c81ecull}));
    EXPECT_EQ(Rng::seed_state(42), (Rng::StateWords{0xbdd732262feb6e95ull, 0x28efe333b266f103ull, 0x47526757130f9f52ull,
                                                    0x581ce1ff0e4ae394ull}));
}

TEST(Rng, Xoshiro256StarStarSequence) {
    Rng a(0);
    const uint64_t expected0[] = {0x99ec5f36cb75f2b4ull, 0xbf6e1f784956452aull, 0x1a5f849d4933e6e0ull,
                                  0x6aa594f1262d2d2cull, 0xbba5ad4a1f842e59ull};
    for (uint64_t e : expected0) EXPECT_EQ(a.next_u64(), e);
    Rng b(42);
    const uint64_t expected42[] = {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull, 0xae17533239e499a1ull,
                                   0xecb8ad4703b360a1ull, 0xfde6dc7fe2ec5e64ull};
    for (uint64_t e : expected42) EXPECT_EQ(b.next_u64(), e);
}

TEST(Rng, UniformFloatIsTop24Bits) {
    Rng a(42), b(42);
    for (int i = 0; i < 1000; ++i) {
        const uint64_t bits = a.next_u64();
        const float u = b.uniform_float();
        EXPECT_EQ(u, static_cast<float>(static_cast<double>(bits >> 40) / 16777216.0));
        EXPECT_GE(u, 0.0f);
        EXPECT_LT(u, 1.0f);
    }
    Rng c(42);
    EXPECT_FLOAT_EQ(c.uniform_float(), 0.08386296033859253f);  // 0x15780b2e0c2ec716 >> 40 = 0x15780b
}

TEST(Rng, ResumesFromState) {
    Rng a(7);
    for (int i = 0; i < 13; ++i) a.next_u64();
    Rng b(a.state());
    for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
}

// ---------------------------------------------------------------------------------------------
// Greedy

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
    const Logits logits = {0.1f, 2.0f, -1.0f, 2.0f, 1.5f};  // ids 1 and 3 tie for the maximum
    for (float t : {0.0f, -1.0f}) {
        Sampler s(plain(t));
        const SamplerState before = s.state();
        EXPECT_EQ(draw(s, logits, 5), (Ids{1, 1, 1, 1, 1}));
        EXPECT_EQ(s.state().rng, before.rng) << "greedy draws no random number";
        const auto dist = s.distribution(logits, {});
        ASSERT_EQ(dist.size(), 1u);
        EXPECT_EQ(dist[0].id, 1);
        EXPECT_EQ(dist[0].probability, 1.0);
    }
    Sampler s(plain(0.0f));
    EXPECT_EQ(s.sample(Logits{-INFINITY, -3.0f, -INFINITY}, {}), 1);
    EXPECT_EQ(s.sample(Logits{5.0f}, {}), 0);
}

TEST(Sampler, TopK1EqualsGreedy) {
    std::mt19937 gen(123);
    std::uniform_int_distribution<int> small(0, 4);  // few distinct values: many ties
    SamplerParams k1 = plain(1.3f, 99);
    k1.top_k = 1;
    Sampler topk(k1), greedy(plain(0.0f));
    for (int trial = 0; trial < 200; ++trial) {
        Logits logits(17);
        for (float& v : logits) v = static_cast<float>(small(gen)) * 0.5f;
        // The expectation from the definition: first index holding the maximum.
        int32_t expected = 0;
        for (int32_t i = 1; i < 17; ++i) {
            if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(expected)]) expected = i;
        }
        EXPECT_EQ(greedy.sample(logits, {}), expected);
        EXPECT_EQ(topk.sample(logits, {}), expected);
    }
}

// ---------------------------------------------------------------------------------------------
// Random sequence: seeds, resume

TEST(Sampler, EqualLogitsDrawInIdOrderFromTheReferenceRng) {
    // Four equal logits: each has probability 1/4 and the cumulative order is by id, so the token is
    // floor(4u) for the RNG's u. Seed 42's first floats (Rng test above): 0.0839 0.3790 0.6800 0.9247 0.9918.
    Sampler s(plain(1.0f, 42));
    EXPECT_EQ(draw(s, Logits(4, 0.5f), 5), (Ids{0, 1, 2, 3, 3}));
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedsDiffer) {
    const Logits logits = {0.3f, 0.1f, 0.0f, 0.2f, -0.1f, 0.25f, 0.05f, 0.15f};
    SamplerParams p = plain(1.0f, 1234);
    p.top_k = 6;
    Sampler a(p), b(p);
    const Ids seq_a = draw(a, logits, 200), seq_b = draw(b, logits, 200);
    EXPECT_EQ(seq_a, seq_b);
    p.seed = 1235;
    Sampler c(p);
    const Ids seq_c = draw(c, logits, 200);
    EXPECT_NE(seq_a, seq_c);
    size_t same = 0;
    for (size_t i = 0; i < seq_a.size(); ++i) same += seq_a[i] == seq_c[i];
    EXPECT_LT(same, 100u) << "independent streams over ~6 tokens agree about 1 time in 6";
}

TEST(Sampler, StateResumesExactly) {
    const Logits logits = {1.0f, 0.5f, 0.0f, 0.8f, 0.2f, 0.9f};
    SamplerParams p = plain(0.9f, 77);
    p.top_k = 5;
    p.top_p = 0.97f;
    p.repeat_penalty = 1.3f;
    p.frequency_penalty = 0.1f;
    p.logit_bias = {{2, 0.4f}};
    Sampler original(p);
    Ids history = {0, 3, 3};
    for (int i = 0; i < 17; ++i) history.push_back(original.sample(logits, history));
    const SamplerState saved = original.state();
    EXPECT_EQ(saved.params.seed, 77u);
    EXPECT_EQ(saved.params.logit_bias, p.logit_bias);
    Sampler resumed(saved);
    Ids h1 = history, h2 = history;
    for (int i = 0; i < 50; ++i) {
        h1.push_back(original.sample(logits, h1));
        h2.push_back(resumed.sample(logits, h2));
    }
    EXPECT_EQ(h1, h2);
    // Not vacuous: a fresh sampler with the same seed is at another point of the sequence.
    Sampler fresh(p);
    Ids h3 = history;
    for (int i = 0; i < 50; ++i) h3.push_back(fresh.sample(logits, h3));
    EXPECT_NE(h1, h3);
}

// ---------------------------------------------------------------------------------------------
// Temperature: the empirical distribution of many draws against softmax(logits / T)

void expect_draws_follow_softmax(const Logits& logits, float temperature, uint64_t seed) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    std::vector<double> expected(logits.size());
    double sum = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) sum += expected[i] = std::exp(logits[i] / temperature);
    for (double& e : expected) e /= sum;

    Sampler s(plain(temperature, seed));
    const auto dist = s.distribution(logits, {});
    ASSERT_EQ(dist.size(), logits.size());
    for (const auto& t : dist) EXPECT_NEAR(t.probability, expected[static_cast<size_t>(t.id)], 1e-6);

    constexpr int n = 200000;
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(logits, {}))];
    double chi2 = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
        const double e = expected[i] * n;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    // 4 degrees of freedom: P(chi2 > 40) ~ 4e-8. The draws are deterministic (fixed seed), so this
    // either always passes or always fails; a wrong temperature (e.g. T^2 or none) gives thousands.
    EXPECT_LT(chi2, 40.0) << "counts " << counts[0] << " " << counts[1] << " " << counts[2] << " " << counts[3] << " "
                          << counts[4];
}

TEST(Sampler, DrawsFollowSoftmaxWithTemperature) {
    const Logits logits = {1.0f, 0.0f, 2.0f, -0.5f, 0.5f};
    expect_draws_follow_softmax(logits, 1.0f, 5);
    expect_draws_follow_softmax(logits, 0.5f, 6);
    expect_draws_follow_softmax(logits, 2.5f, 7);
}

// ---------------------------------------------------------------------------------------------
// Filters: the kept sets, as defined in sampler.h

// Probabilities 0.5, 0.25, 0.15, 0.1 placed at ids 2, 0, 3, 1 (so sorting matters).
const Logits kFour = log_of({0.25, 0.1, 0.5, 0.15});

TEST(Sampler, TopKKeepsTheKLargestTiesByLowestId) {
    SamplerParams p = plain(1.0f);
    p.top_k = 2;
    EXPECT_EQ(kept_ids(Sampler(p).distribution(kFour, {})), (Ids{2, 0}));
    // Softmax over the kept two only: 0.5 / 0.75 and 0.25 / 0.75.
    const auto dist = Sampler(p).distribution(kFour, {});
    EXPECT_NEAR(dist[0].probability, 2.0 / 3.0, 1e-6);
    EXPECT_NEAR(dist[1].probability, 1.0 / 3.0, 1e-6);
    // Three-way tie at the boundary: lowest ids first.
    EXPECT_EQ(kept_ids(Sampler(p).distribution(Logits{1.0f, 3.0f, 3.0f, 3.0f, 0.0f}, {})), (Ids{1, 2}));
    p.top_k = 10;  // more than the vocabulary: all kept
    EXPECT_EQ(kept_ids(Sampler(p).distribution(kFour, {})), (Ids{2, 0, 3, 1}));
}

TEST(Sampler, TopPKeepsTheShortestPrefixReachingP) {
    // Cumulative in sorted order: 0.5, 0.75, 0.9, 1.0.
    const std::vector<std::pair<float, Ids>> cases = {{0.0f, {2}},        {0.3f, {2}},           {0.49f, {2}},
                                                      {0.51f, {2, 0}},    {0.74f, {2, 0}},       {0.76f, {2, 0, 3}},
                                                      {0.89f, {2, 0, 3}}, {0.91f, {2, 0, 3, 1}}, {1.0f, {2, 0, 3, 1}}};
    for (const auto& [top_p, expected] : cases) {
        SamplerParams p = plain(1.0f);
        p.top_p = top_p;
        EXPECT_EQ(kept_ids(Sampler(p).distribution(kFour, {})), expected) << "top_p " << top_p;
    }
    SamplerParams p = plain(1.0f, 3);
    p.top_p = 0.8f;
    const auto dist = Sampler(p).distribution(kFour, {});
    EXPECT_NEAR(dist[2].probability, 0.15 / 0.9, 1e-6);  // renormalised
    Sampler s(p);
    std::set<int32_t> seen;
    for (int i = 0; i < 3000; ++i) seen.insert(s.sample(kFour, {}));
    EXPECT_EQ(seen, (std::set<int32_t>{0, 2, 3}));
}

TEST(Sampler, MinPDropsBelowFractionOfTop) {
    // Threshold = min_p × 0.5.
    const std::vector<std::pair<float, Ids>> cases = {
        {0.0f, {2, 0, 3, 1}}, {0.19f, {2, 0, 3, 1}}, {0.21f, {2, 0, 3}}, {0.29f, {2, 0, 3}},
        {0.31f, {2, 0}},      {0.49f, {2, 0}},       {0.51f, {2}},       {1.0f, {2}}};
    for (const auto& [min_p, expected] : cases) {
        SamplerParams p = plain(1.0f);
        p.min_p = min_p;
        EXPECT_EQ(kept_ids(Sampler(p).distribution(kFour, {})), expected) << "min_p " << min_p;
    }
    // After top-k and at a temperature: T = 0.5 squares the ratios (0.25 / 0.5 -> 0.25, 0.15 / 0.5 ->
    // 0.09, 0.1 / 0.5 -> 0.04 of the top), top_k 3 drops id 1; min_p 0.2 then keeps ids 2 and 0.
    SamplerParams p = plain(0.5f);
    p.top_k = 3;
    p.min_p = 0.2f;
    const auto dist = Sampler(p).distribution(kFour, {});
    EXPECT_EQ(kept_ids(dist), (Ids{2, 0}));
    EXPECT_NEAR(dist[0].probability, 1.0 / 1.25, 1e-6);
}

TEST(Sampler, LogitBiasAddsAndMinusInfinityBans) {
    const Logits logits = {0.0f, 1.0f, 5.0f, 2.0f};
    SamplerParams p = plain(0.0f);
    p.logit_bias = {{2, -INFINITY}};
    Sampler greedy(p);
    EXPECT_EQ(greedy.sample(logits, {}), 3);
    p.temperature = 1.0f;
    Sampler s(p);
    EXPECT_EQ(kept_ids(s.distribution(logits, {})), (Ids{3, 1, 0}));
    for (int i = 0; i < 2000; ++i) ASSERT_NE(s.sample(logits, {}), 2);
    // A finite bias adds: id 0 gets 0 + 6 = 6 > 5.
    p.temperature = 0.0f;
    p.logit_bias = {{0, 6.0f}};
    EXPECT_EQ(Sampler(p).sample(logits, {}), 0);
    // Everything banned: an error, not a made-up token.
    p.logit_bias = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}, {3, -INFINITY}};
    for (float t : {0.0f, 1.0f}) {
        p.temperature = t;
        Sampler banned(p);
        EXPECT_THROW(banned.sample(logits, {}), Error);
    }
}

// ---------------------------------------------------------------------------------------------
// Penalties: the adjusted logits, read back as log-probability differences at temperature 1

// logit'(i) - logit'(0) = log p(i) - log p(0).
std::vector<double> relative_logits(const SamplerParams& p, const Logits& logits, const Ids& history) {
    const auto dist = Sampler(p).distribution(logits, history);
    std::map<int32_t, double> prob;
    for (const auto& t : dist) prob[t.id] = t.probability;
    std::vector<double> out;
    for (size_t i = 0; i < logits.size(); ++i) out.push_back(std::log(prob.at(static_cast<int32_t>(i)) / prob.at(0)));
    return out;
}

void expect_adjusted(const SamplerParams& p, const Logits& logits, const Ids& history,
                     const std::vector<double>& want) {
    const auto got = relative_logits(p, logits, history);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i] - want[0], 1e-5) << "token " << i;
}

TEST(Sampler, PenaltiesNumerically) {
    const Logits logits = {2.0f, -2.0f, 1.0f, 0.5f, 0.7f};
    const Ids history = {0, 1, 1, 3};  // counts: 0 once, 1 twice, 3 once
    SamplerParams p = plain(1.0f);
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.repeat_last_n = 64;
    // 0: 2 / 2 - 0.5 - 0.25 = 0.25;  1: -2 × 2 - 2 × 0.5 - 0.25 = -5.25;  2: untouched 1;
    // 3: 0.5 / 2 - 0.5 - 0.25 = -0.5;  4: untouched 0.7.
    expect_adjusted(p, logits, history, {0.25, -5.25, 1.0, -0.5, 0.7});
    p.repeat_last_n = -1;  // whole history: same here
    expect_adjusted(p, logits, history, {0.25, -5.25, 1.0, -0.5, 0.7});
    p.repeat_last_n = 2;  // window {1, 3}: 1 once -> -4 - 0.5 - 0.25 = -4.75
    expect_adjusted(p, logits, history, {2.0, -4.75, 1.0, -0.5, 0.7});
    p.repeat_last_n = 0;  // off
    expect_adjusted(p, logits, history, {2.0, -2.0, 1.0, 0.5, 0.7});
    // Only the repeat penalty: 2 / 1.1 = 1.818 < 1.9, so greedy moves to id 1.
    SamplerParams g = plain(0.0f);
    g.repeat_penalty = 1.1f;
    EXPECT_EQ(Sampler(g).sample(Logits{2.0f, 1.9f}, Ids{0}), 1);
    EXPECT_EQ(Sampler(g).sample(Logits{2.0f, 1.9f}, Ids{1}), 0);
    // Bias comes first: the penalty divides the biased logit (1 + 3) / 2 = 2 > 1.9.
    g.repeat_penalty = 2.0f;
    g.logit_bias = {{0, 3.0f}};
    EXPECT_EQ(Sampler(g).sample(Logits{1.0f, 1.9f}, Ids{0}), 0);
}

// ---------------------------------------------------------------------------------------------
// Validation

void expect_invalid(const SamplerParams& p, const char* what) {
    try {
        Sampler s(p);
        ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << what;
    }
}

TEST(Sampler, RejectsParametersOutOfRange) {
    const auto with = [](auto change) {
        SamplerParams p;
        change(p);
        return p;
    };
    expect_invalid(with([](SamplerParams& p) { p.temperature = NAN; }), "NaN temperature");
    expect_invalid(with([](SamplerParams& p) { p.temperature = INFINITY; }), "inf temperature");
    expect_invalid(with([](SamplerParams& p) { p.top_p = -0.1f; }), "top_p < 0");
    expect_invalid(with([](SamplerParams& p) { p.top_p = 1.5f; }), "top_p > 1");
    expect_invalid(with([](SamplerParams& p) { p.top_p = NAN; }), "NaN top_p");
    expect_invalid(with([](SamplerParams& p) { p.min_p = -0.5f; }), "min_p < 0");
    expect_invalid(with([](SamplerParams& p) { p.min_p = 2.0f; }), "min_p > 1");
    expect_invalid(with([](SamplerParams& p) { p.repeat_penalty = 0.0f; }), "repeat_penalty 0");
    expect_invalid(with([](SamplerParams& p) { p.repeat_penalty = -1.0f; }), "repeat_penalty < 0");
    expect_invalid(with([](SamplerParams& p) { p.repeat_last_n = -2; }), "repeat_last_n < -1");
    expect_invalid(with([](SamplerParams& p) { p.presence_penalty = NAN; }), "NaN presence");
    expect_invalid(with([](SamplerParams& p) { p.frequency_penalty = INFINITY; }), "inf frequency");
    expect_invalid(with([](SamplerParams& p) { p.logit_bias = {{-1, 1.0f}}; }), "negative bias id");
    expect_invalid(with([](SamplerParams& p) { p.logit_bias = {{3, NAN}}; }), "NaN bias");
    expect_invalid(with([](SamplerParams& p) { p.logit_bias = {{3, INFINITY}}; }), "+inf bias");
    // Allowed edges.
    EXPECT_NO_THROW(Sampler(with([](SamplerParams& p) { p.temperature = -2.0f; })));
    EXPECT_NO_THROW(Sampler(with([](SamplerParams& p) {
        p.top_p = 0.0f;
        p.min_p = 1.0f;
        p.top_k = -5;
    })));
    EXPECT_NO_THROW(Sampler(with([](SamplerParams& p) { p.logit_bias = {{3, -INFINITY}}; })));

    SamplerState zero;  // rng all zero: xoshiro's fixed point
    EXPECT_THROW(Sampler{zero}, Error);
    SamplerState bad = Sampler(SamplerParams{}).state();
    bad.params.top_p = 3.0f;
    EXPECT_THROW(Sampler{bad}, Error);
}

TEST(Sampler, RejectsBadInputsAtSampleTime) {
    const auto expect_invalid_sample = [](SamplerParams p, const Logits& logits, const Ids& history, const char* what) {
        for (float t : {0.0f, 1.0f}) {
            p.temperature = t;
            Sampler s(p);
            try {
                s.sample(logits, history);
                ADD_FAILURE() << what << ": no error";
            } catch (const Error& e) {
                EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << what;
            }
        }
    };
    SamplerParams p = plain(1.0f);
    expect_invalid_sample(p, {}, {}, "empty logits");
    expect_invalid_sample(p, {1.0f, NAN}, {}, "NaN logit");
    expect_invalid_sample(p, {1.0f, INFINITY}, {}, "+inf logit");
    SamplerParams biased = p;
    biased.logit_bias = {{2, 1.0f}};
    expect_invalid_sample(biased, {1.0f, 2.0f}, {}, "bias id past the logits");
    SamplerParams penalised = p;
    penalised.repeat_penalty = 1.2f;
    expect_invalid_sample(penalised, {1.0f, 2.0f}, {0, 5}, "history id past the logits");
}

}  // namespace
}  // namespace kvstash
