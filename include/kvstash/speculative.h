// Speculative decoding that changes no bit: a drafter guesses the next tokens, the target model
// evaluates them in one batch, and the target's own sampler decides every position in order.
//
//   kvstash::GenerateOptions options;
//   options.drafter = kvstash::make_lookup_drafter();   // or make_model_drafter(draft_model, ...)
//   options.speculation.max_draft = 8;
//   auto result = kvstash::generate(evaluator, state, sampler, options);
//   // result.drafted / result.accepted: how many guesses were made and how many were kept
//
// Why the output is exactly that of plain decoding: kvstash's forward pass is batch-invariant (the
// logits of position i depend on tokens[0..i] only, bitwise, however they were batched), so the k
// rows of a verification batch are bitwise the logits k single steps would give. Each position is
// then sampled by the target's Sampler from those logits, with the history plain decoding would pass
// and the same RNG stream; a draft token is kept only while it equals the sampled token, and at the
// first mismatch the sampled token is the real next one. The rejected positions are cut from the
// State (State::truncate), the sampler and the grammar never see them. So text, token ids, the logits
// each token was sampled from, the sampler's final state and the saved state are bitwise those of
// generate() without a drafter, for every sampler setting and seed. Drafters only change speed.
//
// Not offered (Error(unsupported)) for states that cannot be cut back without a trace: models with
// recurrent layers (their checkpoints would differ). Sliding-window layers (Gemma 3) are fine: while
// guesses are verified they are trimmed only as far as plain decoding would have.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/state.h"

namespace kvstash {

// Proposes tokens that may follow a sequence. Called once per verification round.
class Drafter {
public:
    virtual ~Drafter() = default;
    // Appends to `draft` up to `max_tokens` (>= 1) guesses for the tokens after `context` (the whole
    // sequence so far: prompt and generated tokens, the last one not yet evaluated by the target).
    // Proposing none is fine (that round decodes one token, as plain decoding).
    virtual void propose(std::span<const int32_t> context, int32_t max_tokens, std::vector<int32_t>& draft) = 0;
    virtual const char* name() const = 0;  // "lookup", "draft", ...
};

struct LookupDrafterOptions {
    // The longest and shortest n-gram (the context's last tokens) looked up earlier in the context; the
    // longest that occurs wins, its latest occurrence, and the tokens that followed it are proposed.
    int32_t max_ngram = 4;
    int32_t min_ngram = 2;
};

// Prompt lookup: guesses from the sequence's own tokens (the prompt, a document, the conversation).
// Costs no model evaluation; helps where the output repeats the input (extraction, edits, summaries).
std::unique_ptr<Drafter> make_lookup_drafter(const LookupDrafterOptions& options = {});

struct ModelDrafterOptions {
    int n_threads = 0;  // the draft evaluator's threads (0 = hardware threads)
    // Stop drafting a round when the draft model's top token has a probability below this
    // (llama-server's speculative.p_min); 0: never stop early.
    float p_min = 0.0f;
    int64_t n_ctx = 0;  // the draft State's context (0 = the draft model's training context)
};

// A draft model with the target's vocabulary (same n_vocab; throws Error(invalid_argument) otherwise,
// checked against `target`): greedy guesses from its own State, which follows the target's sequence
// (cut back to the common prefix and extended before each round). A lower-bit copy of the target
// (Model::load with ModelLoadOptions::quantize) is self-speculation.
std::unique_ptr<Drafter> make_model_drafter(std::shared_ptr<const Model> draft_model, const Model& target,
                                            const ModelDrafterOptions& options = {});

// The first round's draft length: min(this, max_draft). Short, so that a drafter whose guesses are wrong
// (prompt lookup on free writing) costs little (a 2-guess batch costs about as much as one step); right
// guesses double it each round.
inline constexpr int32_t kFirstDraftLength = 2;

// The draft length after a round that verified `drafted` guesses and kept `accepted` of them (generate()
// and the server's sequences): doubled, up to options.max_draft, when all were kept; else one more than
// the number kept (a drafter that is often wrong early costs small batches).
int32_t next_draft_length(const SpeculationOptions& options, int32_t current, size_t drafted, size_t accepted);

// Throws Error(unsupported) naming the reason when speculation cannot be exact on `state` (see above).
void check_speculation_supported(const State& state);

}  // namespace kvstash
