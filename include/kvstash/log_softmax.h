// Log-softmax over a row of logits (n_vocab floats), in double: the server's logprobs and the
// perplexity command both read probabilities through it, so they agree to the last bit.
#pragma once

#include <cstddef>
#include <span>

namespace kvstash {

// log(sum_i exp(logits[i])): the largest logit is subtracted before exp (no overflow), and the sum runs
// in index order, so the result is the same bits on every run and machine. -inf for an empty row.
double log_sum_exp(std::span<const float> logits);

// log softmax(logits)[index] = logits[index] - log_sum_exp(logits). Callers that need many entries of one
// row call log_sum_exp once and subtract.
double log_softmax_at(std::span<const float> logits, size_t index);

}  // namespace kvstash
