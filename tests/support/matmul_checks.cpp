#include "support/matmul_checks.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "support/random_operands.h"

namespace kvstash::test {

std::vector<float> edge_activations(int64_t n_tokens, int64_t cols, uint32_t seed) {
    std::vector<float> X = random_activations(n_tokens * cols, seed);
    if (n_tokens >= 2) {
        std::fill(X.begin(), X.begin() + cols, 0.0f);
        for (int64_t k = 0; k < cols; k += 32) X[static_cast<size_t>(cols + k)] = 1e6f;
    }
    return X;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, int64_t rows,
                      const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(same_bits(got[i], want[i])) << what << ": token " << i / static_cast<size_t>(rows) << " row "
                                                << i % static_cast<size_t>(rows) << ": " << got[i] << " vs " << want[i];
    }
}

}  // namespace kvstash::test
