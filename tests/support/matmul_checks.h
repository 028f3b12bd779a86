// Shared by the matmul kernel tests: activations at the edges of the integer ranges, and a bitwise comparison of
// two outputs (n_tokens × rows) that names the first token and row that differ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvstash::test {

// n_tokens × cols activations from N(0, 1), with token 0 all zeros and token 1 one huge value (1e6) per 32-element
// block (where n_tokens >= 2): the integer quantizer's zero and saturated rows.
std::vector<float> edge_activations(int64_t n_tokens, int64_t cols, uint32_t seed);

// Fails (a fatal gtest failure) at the first element whose bits differ, naming `what`, its token and row.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, int64_t rows,
                      const std::string& what);

}  // namespace kvstash::test
