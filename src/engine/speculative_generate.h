// generate() with a drafter (kvstash/speculative.h): rounds of draft -> verify in one batch -> decide
// each position with the target's sampler -> cut the rejected positions. generate() calls it after
// validating its arguments.
#pragma once

#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"

namespace kvstash {

GenerateResult generate_speculative(Evaluator& evaluator, State& state, Sampler& sampler,
                                    const GenerateOptions& options, const TokenCallback& on_text);

}  // namespace kvstash
