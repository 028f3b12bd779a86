// The next token under a grammar (generate() and the server's sequences): Sampler::sample_allowed, which
// asks the constraint about single tokens most likely first (greedy and top-k sampling: a few tokens
// stepped instead of the whole vocabulary's mask), and only when that cannot decide, the full mask
// (GrammarConstraint::mask) and Sampler::sample. Either way the token and the RNG state are those of
// sample() over the masked logits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvstash/grammar.h"
#include "kvstash/sampler.h"

namespace kvstash {

// Tokens asked before the full mask is computed instead: a state that allows few tokens (few enough that
// the top k allowed lie past this many candidates) has a cheap mask walk (most of the trie is cut at its
// first byte), and a state that allows many settles within a few dozen.
inline constexpr size_t kConstrainedMaxAsked = 1024;

// A cached mask (GrammarConstraint::mask_is_cached) is used as it is: a copy is cheaper than asking tokens
// one by one. nullopt: the grammar allows no token of the vocabulary here. `masked` is scratch (n_vocab floats when
// the full mask is needed). Throws as Sampler::sample.
std::optional<int32_t> sample_constrained(Sampler& sampler, GrammarConstraint& constraint,
                                          std::span<const float> logits, std::span<const int32_t> history,
                                          std::vector<float>& masked);

}  // namespace kvstash
