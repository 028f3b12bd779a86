// The generation loop: sample, evaluate, stream, stop.
//
//   kvstash::GenerateOptions options;
//   options.max_tokens = 128;
//   auto result = kvstash::generate(evaluator, state, sampler, options,
//       [](int32_t token, std::string_view text) { std::cout << text << std::flush; return true; });
//
// Every sampled token is evaluated before the loop checks whether to stop, so on return the State
// holds the whole sequence (prompt + generated tokens) and the logits after the last one: it can be
// continued, forked or saved as it is. The sampler's state is stored in the State as well (also when
// an error is thrown); to continue a saved state's random sequence, build the next Sampler from
// *state.sampler_state(). The sampler's penalty window looks at the whole sequence, prompt included.
//
// Each step: sample from state.last_logits() -> evaluate the token -> stop on, in this order: an
// end-of-generation token, a stop string, max_tokens, the context being full (no token is sampled
// that could not be evaluated), the callback returning false.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/evaluator.h"
#include "kvstash/grammar.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"

namespace kvstash {

class Drafter;  // kvstash/speculative.h

// Speculative decoding's knobs (kvstash/speculative.h); used only with a drafter.
struct SpeculationOptions {
    // Most and fewest draft tokens verified per round (llama-server's speculative.n_max / n_min): a
    // drafter's proposal shorter than min_draft is not verified (that round decodes one token). The
    // draft length starts at 2 (kFirstDraftLength) and adapts to the acceptance rate: doubled (up to
    // max_draft) after a round whose drafts were all accepted, else one more than the number accepted;
    // drafting pauses while few guesses are kept (DraftLengthPolicy, kvstash/speculative.h).
    // 16 as llama-server's n_max: with prompt lookup, 16 ran 1.05-1.24x the speed of 8 in every workload measured
    // (docs/benchmarks.md, "Speculative decoding"); the doubling reaches it only after rounds that kept everything.
    int32_t max_draft = 16;
    int32_t min_draft = 1;
};

struct GenerateOptions {
    int64_t max_tokens = 256;  // 0: return at once, sampling nothing
    // Generation stops before the first occurrence (not included in the text); none empty.
    std::vector<std::string> stop_strings;
    bool stop_at_end_of_generation = true;  // EOS / end-of-turn tokens (Tokenizer::is_eog); not included in the text
    // Called with the logits each token is sampled from and the token chosen (for tracing and for
    // checking that continuations are bit-identical). Empty = none.
    std::function<void(std::span<const float> logits, int32_t token)> on_sample;
    // Constrained output (grammar.h): before each step the tokens the grammar does not allow get
    // -INFINITY in a copy of the logits, which the sampler then sees (on_sample still gets the model's
    // logits; greedy and top-k sampling get the same token and RNG state without the whole mask, asking
    // about the likeliest tokens one at a time: Sampler::sample_allowed); each sampled token advances the
    // constraint; generation stops (end_of_generation) when the grammar is complete and nothing may
    // follow; throws Error(invalid_argument) when the grammar allows no token of the vocabulary. Empty:
    // the logits go to the sampler untouched.
    std::shared_ptr<GrammarConstraint> constraint;
    // Speculative decoding (kvstash/speculative.h): the drafter's guesses are verified in batches; the
    // result and the state are bitwise those without it. Null: plain decoding. Throws Error(unsupported)
    // for states speculation cannot cut back exactly (recurrent layers).
    std::shared_ptr<Drafter> drafter;
    SpeculationOptions speculation;
};

enum class StopReason { end_of_generation, stop_string, max_tokens, callback, context_full };
const char* stop_reason_name(StopReason reason);  // "end_of_generation", "stop_string", ...

struct GenerateResult {
    // Generated ids (including a final EOG token, if any, and the token that completed a stop string).
    std::vector<int32_t> tokens;
    std::string text;  // their text (Tokenizer::token_piece), without EOG tokens and cut before a stop string
    StopReason stop = StopReason::max_tokens;
    double seconds = 0.0;  // wall time of the loop
    // Speculative decoding: draft tokens verified, and how many of them were kept (accepted / drafted
    // is the acceptance rate); verification batches run. 0 without a drafter.
    int64_t drafted = 0;
    int64_t accepted = 0;
    int64_t verify_rounds = 0;
};

// Called once per piece of text ready to show: complete UTF-8 characters only, never text that could
// still turn out to be the start of a stop string. `token` is the last token sampled. Return false
// to stop generation (StopReason::callback). When generation ends for another reason, what was held
// back is passed in a last call (an incomplete character at the very end included), so the pieces
// concatenate to result.text. After returning false it is not called again, and result.text may hold
// a held-back tail it was not shown.
using TokenCallback = std::function<bool(int32_t token, std::string_view text)>;

// The state must hold at least one token (its last_logits are where sampling starts). Throws
// Error(invalid_argument) if it holds none, for a negative max_tokens or an empty stop string; errors
// of the sampler, the evaluator or the callback propagate, leaving the state with the tokens evaluated
// so far.
GenerateResult generate(Evaluator& evaluator, State& state, Sampler& sampler, const GenerateOptions& options,
                        const TokenCallback& on_text = {});

// One sequence of generate_batch(): its State (holding at least one token), its own Sampler and options.
struct BatchSequence {
    State* state = nullptr;
    Sampler* sampler = nullptr;
    GenerateOptions options;
};

// Generates for several sequences together: each step samples one token per unfinished sequence, then
// evaluates them all in one Evaluator::eval_batch (each weight matrix read once for all of them). Each
// sequence's result, State and sampler state are bitwise what generate() on it alone would give (the
// evaluation is batch-invariant, the sampling per sequence). The States must be distinct (forks are
// fine). Not supported here: a grammar constraint (Error(invalid_argument)); no text callback. Throws as
// generate() does, checking every sequence first; on an error thrown mid-way each State holds the tokens
// evaluated so far and its sampler state.
std::vector<GenerateResult> generate_batch(Evaluator& evaluator, std::span<const BatchSequence> sequences);

}  // namespace kvstash
