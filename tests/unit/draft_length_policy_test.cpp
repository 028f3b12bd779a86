// How many guesses each speculative round asks for (DraftLengthPolicy, kvstash/speculative.h): the adaptive
// length (start at 2, double while all are kept, else one more than kept), the pause while few guesses are kept,
// the probes that end it (after 4 paused rounds, then 8, 16 ... up to 64 while probes fail), the shadow checks that
// replace the probes for a drafter that costs nothing to ask, and that a grounded run with an occasional miss never
// pauses. The rounds are driven by hand: round_length() once per round, then
// verified() where the round's guesses were checked. (That the output is plain decoding's whatever the policy
// asks for: speculative_generate_test.cpp, the parity and e2e speculative tests.)
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "kvstash/speculative.h"

namespace kvstash {
namespace {

SpeculationOptions max_draft(int32_t n) {
    SpeculationOptions options;
    options.max_draft = n;
    return options;
}

// Rounds until round_length() asks for guesses again (at most `limit`); the asking round included.
int rounds_until_asked(DraftLengthPolicy& policy, int limit = 1000) {
    for (int round = 1; round <= limit; ++round) {
        if (policy.round_length() > 0) return round;
    }
    return -1;
}

TEST(DraftLengthPolicy, LengthDoublesWhileAllAreKeptAndFollowsTheKeptCountOtherwise) {
    DraftLengthPolicy policy(max_draft(8), false);
    EXPECT_EQ(policy.round_length(), 2);
    policy.verified(2, 2);
    EXPECT_EQ(policy.round_length(), 4);
    policy.verified(4, 4);
    EXPECT_EQ(policy.round_length(), 8);
    policy.verified(8, 8);
    EXPECT_EQ(policy.round_length(), 8);  // max_draft
    policy.verified(8, 5);
    EXPECT_EQ(policy.round_length(), 6);  // one more than kept
    EXPECT_FALSE(policy.paused());
    EXPECT_EQ(DraftLengthPolicy(max_draft(1), false).round_length(), 1);
}

TEST(DraftLengthPolicy, RoundsThatKeepNothingPauseThenProbesBackOff) {
    DraftLengthPolicy policy(max_draft(8), false);
    ASSERT_EQ(policy.round_length(), 2);
    policy.verified(2, 0);  // acceptance 0.5
    EXPECT_FALSE(policy.paused());
    ASSERT_EQ(policy.round_length(), 1);
    policy.verified(1, 0);  // 0.25: below 0.3
    EXPECT_TRUE(policy.paused());
    // Paused: 3 rounds ask for nothing, the 4th is a probe (length as after the last round: one guess).
    EXPECT_EQ(rounds_until_asked(policy), DraftLengthPolicy::kFirstProbeInterval);
    policy.verified(1, 0);
    EXPECT_TRUE(policy.paused());
    EXPECT_EQ(rounds_until_asked(policy), 2 * DraftLengthPolicy::kFirstProbeInterval);
    policy.verified(1, 0);
    EXPECT_EQ(rounds_until_asked(policy), 4 * DraftLengthPolicy::kFirstProbeInterval);
    for (int probe = 0; probe < 8; ++probe) {
        policy.verified(1, 0);
        EXPECT_LE(rounds_until_asked(policy), DraftLengthPolicy::kLastProbeInterval);
    }
    EXPECT_TRUE(policy.paused());
}

TEST(DraftLengthPolicy, AProbeWithNoGuessStaysDueAndAKeptProbeResumes) {
    DraftLengthPolicy policy(max_draft(8), false);
    policy.round_length();
    policy.verified(2, 0);
    policy.round_length();
    policy.verified(1, 0);
    ASSERT_TRUE(policy.paused());
    ASSERT_EQ(rounds_until_asked(policy), DraftLengthPolicy::kFirstProbeInterval);
    // The drafter found nothing to propose: no verified() call; the next rounds still probe.
    EXPECT_EQ(policy.round_length(), 1);
    EXPECT_EQ(policy.round_length(), 1);
    policy.verified(1, 1);  // the probe's guess was kept: drafting resumes, the length doubles
    EXPECT_FALSE(policy.paused());
    EXPECT_EQ(policy.round_length(), 2);
    policy.verified(2, 2);
    EXPECT_EQ(policy.round_length(), 4);
    // A later pause starts again from the first probe interval.
    policy.verified(4, 0);
    policy.round_length();
    policy.verified(1, 0);
    ASSERT_TRUE(policy.paused());
    EXPECT_EQ(rounds_until_asked(policy), DraftLengthPolicy::kFirstProbeInterval);
}

// Prompt lookup (costs nothing to ask): paused rounds ask for no verified guess and never probe; a shadow guess that
// was right resumes drafting at once, a wrong one changes nothing.
TEST(DraftLengthPolicy, ShadowChecksReplaceProbesForADrafterThatCostsNothing) {
    DraftLengthPolicy policy(max_draft(8), true);
    EXPECT_FALSE(policy.wants_shadow_guess());
    policy.round_length();
    policy.verified(2, 0);
    policy.round_length();
    policy.verified(1, 0);
    ASSERT_TRUE(policy.paused());
    for (int round = 0; round < 200; ++round) {
        ASSERT_EQ(policy.round_length(), 0) << "round " << round;
        ASSERT_TRUE(policy.wants_shadow_guess());
        policy.shadow_checked(false);
    }
    EXPECT_TRUE(policy.paused());
    policy.shadow_checked(true);
    EXPECT_FALSE(policy.paused());
    EXPECT_FALSE(policy.wants_shadow_guess());
    EXPECT_EQ(policy.round_length(), 1);  // one more than the last round kept
    policy.verified(1, 0);                // the first verified round after a shadow resume keeps nothing: paused again
    EXPECT_TRUE(policy.paused());
    // Without shadow checks a paused policy never asks for shadow guesses.
    DraftLengthPolicy probing(max_draft(8), false);
    probing.round_length();
    probing.verified(2, 0);
    probing.round_length();
    probing.verified(1, 0);
    ASSERT_TRUE(probing.paused());
    EXPECT_FALSE(probing.wants_shadow_guess());
}

// Grounded text as measured (SmolLM2, 86% of 164 guesses kept): rounds mostly kept whole, a single miss now and
// then (one word that differs) must not pause drafting.
TEST(DraftLengthPolicy, OccasionalMissesInAGroundedRunDoNotPause) {
    DraftLengthPolicy policy(max_draft(8), false);
    const std::vector<std::pair<int, int>> kept_of = {{8, 8}, {8, 8}, {8, 0}, {1, 1}, {2, 2}, {4, 3}, {4, 4},
                                                      {8, 8}, {8, 2}, {3, 3}, {6, 6}, {8, 0}, {1, 1}, {2, 2}};
    for (const auto& [asked, kept] : kept_of) {
        const int32_t length = policy.round_length();
        ASSERT_GT(length, 0) << "paused at acceptance " << policy.acceptance();
        policy.verified(static_cast<size_t>(std::min(asked, length)), static_cast<size_t>(std::min(kept, length)));
    }
    EXPECT_FALSE(policy.paused());
}

}  // namespace
}  // namespace kvstash
