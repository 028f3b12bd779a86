// Read a long prefix once, then continue it many ways (each continuation forks the prefix):
//
//   kvstash::State book = kvstash::evaluate_prefix(evaluator, text);
//   auto a = kvstash::generate_from_prefix(evaluator, book, " Question one?", sampler, options);
//   auto b = kvstash::generate_from_prefix(evaluator, book, " Question two?", sampler, options);
//
// Thin conveniences over State + Evaluator + generate(). For a multi-turn chat see session.h.
#pragma once

#include <string_view>

#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"

namespace kvstash {

// Tokenizes `text` (with BOS if the vocabulary asks for one; special-token text is parsed) and
// evaluates it into a new State.
State evaluate_prefix(Evaluator& evaluator, std::string_view text, StateOptions options = {});

// Forks `prefix`, appends `continuation` (no BOS), and generates. `prefix` is left untouched.
GenerateResult generate_from_prefix(Evaluator& evaluator, const State& prefix, std::string_view continuation,
                                    Sampler& sampler, const GenerateOptions& options,
                                    const TokenCallback& on_text = {});

}  // namespace kvstash
