// Helpers shared by the parity tests: evaluate a token sequence under a given split and thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstash/evaluator.h"
#include "kvstash/kv_type.h"
#include "kvstash/model.h"
#include "kvstash/state.h"

namespace kvstash::test {

// Logits (tokens.size() × n_vocab) of `tokens` evaluated from an empty state in consecutive eval()
// calls of the given chunk sizes (cycled until all tokens are done).
std::vector<float> eval_logits(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens,
                               const std::vector<int64_t>& chunk_sizes, int n_threads, KvType kv_type = KvType::f16);

// Deterministic pseudo-random token ids in [0, n_vocab).
std::vector<int32_t> pseudo_random_tokens(int64_t count, int64_t n_vocab, uint64_t seed);

nlohmann::json load_json(const std::string& path);

// Logits against a reference, row t of ours (rows × n_vocab) against row t of `ref` (JSON rows of n_vocab numbers):
// the worst row's max|ref − ours| / max|ref| within the row, the largest |ref − ours| and the largest |ref|.
struct RowErrors {
    double worst_relative = 0.0;
    double worst_abs = 0.0;
    double max_ref = 0.0;
};
RowErrors row_errors(const nlohmann::json& ref, const std::vector<float>& ours, size_t n_vocab);
// row_errors(...).worst_relative.
double worst_row_relative_error(const nlohmann::json& ref, const std::vector<float>& ours, size_t n_vocab);

// Files in tests/fixtures/<dir> whose names end with `suffix`, sorted.
std::vector<std::string> fixture_files(const std::string& dir, const std::string& suffix);

}  // namespace kvstash::test
