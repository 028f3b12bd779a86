// engine/log_softmax against the textbook formula log(sum exp(x)) computed directly in double (no max
// subtraction: fine for the moderate logits used here), and on rows where the direct formula overflows.
#include "kvstash/log_softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace kvstash {
namespace {

double direct_log_sum_exp(const std::vector<float>& logits) {
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l));
    return std::log(sum);
}

TEST(LogSoftmax, MatchesTheDirectFormulaOnRandomRows) {
    std::mt19937 rng(7);
    std::normal_distribution<float> logit(0.0f, 4.0f);
    for (size_t n : {1u, 2u, 17u, 1000u, 49152u}) {
        std::vector<float> row(n);
        for (float& l : row) l = logit(rng);
        const double expected = direct_log_sum_exp(row);
        EXPECT_NEAR(log_sum_exp(row), expected, 1e-12 * std::max(1.0, std::abs(expected))) << n;
        const double lse = log_sum_exp(row);
        double probability_sum = 0.0;
        for (size_t i = 0; i < n; ++i) probability_sum += std::exp(static_cast<double>(row[i]) - lse);
        EXPECT_NEAR(probability_sum, 1.0, 1e-12) << n;
        for (size_t i = 0; i < n; i += 1 + n / 16) {
            EXPECT_NEAR(log_softmax_at(row, i), static_cast<double>(row[i]) - expected, 1e-11) << n << " " << i;
        }
    }
}

TEST(LogSoftmax, LargeLogitsDoNotOverflow) {
    // exp(1000) overflows a double; softmax is shift-invariant, so the row [1000, 1000 + d] has the
    // probabilities 1 / (1 + e^d) and e^d / (1 + e^d). d is about ln 3 (1/4 and 3/4), exactly the float
    // difference of the two logits.
    const std::vector<float> row = {1000.0f, 1000.0f + static_cast<float>(std::log(3.0))};
    const double d = static_cast<double>(row[1] - row[0]);
    const double shifted = direct_log_sum_exp({0.0f, static_cast<float>(d)});
    EXPECT_NEAR(log_sum_exp(row), 1000.0 + shifted, 1e-9);
    EXPECT_NEAR(std::exp(log_softmax_at(row, 0)), 1.0 / (1.0 + std::exp(d)), 1e-11);
    EXPECT_NEAR(std::exp(log_softmax_at(row, 1)), std::exp(d) / (1.0 + std::exp(d)), 1e-11);
    EXPECT_NEAR(std::exp(log_softmax_at(row, 1)), 0.75, 1e-4);
    const std::vector<float> low = {-1000.0f, -1000.0f};
    EXPECT_NEAR(log_softmax_at(low, 1), -std::log(2.0), 1e-12);
}

TEST(LogSoftmax, InfiniteLogitsAreZeroProbability) {
    const std::vector<float> row = {-INFINITY, 0.0f, -INFINITY};
    EXPECT_EQ(log_softmax_at(row, 1), 0.0);
    EXPECT_EQ(log_softmax_at(row, 0), -INFINITY);
}

}  // namespace
}  // namespace kvstash
