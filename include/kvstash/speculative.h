// Speculative decoding that changes no bit: a drafter guesses the next tokens, the target model
// evaluates them in one batch, and the target's own sampler decides every position in order.
//
//   kvstash::GenerateOptions options;
//   options.drafter = kvstash::make_lookup_drafter();   // or make_model_drafter(draft_model, ...)
//   options.speculation.max_draft = 16;
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
    // Whether a proposal costs no model work (prompt lookup): then, while drafting is paused, its guesses are
    // still asked for and checked against the tokens decoded (DraftLengthPolicy's shadow checks) instead of
    // verified in batches.
    virtual bool costs_nothing() const { return false; }
};

struct LookupDrafterOptions {
    // The longest and shortest n-gram (the context's last tokens) looked up earlier in the context; the
    // longest that occurs wins, its latest occurrence, and the tokens that followed it are proposed. Where that
    // occurrence overlaps the suffix (a repetition with a shorter period) the guesses go on repeating it.
    // 16: a long match picks the right place in a document whose short n-grams recur (names, phrases); it
    // costs nothing where none occurs (one pass over the context either way).
    int32_t max_ngram = 16;
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

// How many guesses each round asks for (generate() and each of the server's sequences): the length of
// next_draft_length, and a pause keyed on acceptance. A verification batch of k + 1 rows costs more than one
// decode step (on a CPU at 135M parameters, about 1 + 0.3-0.6·k steps: docs/benchmarks.md), so guesses that
// are rarely kept (prompt lookup on free writing) make decoding slower than plain. The policy keeps a running
// acceptance rate, each verified round's accepted / drafted weighted by kAcceptanceWeight against the rounds
// before (starting at 1: a new sequence drafts at once); below kPauseBelow it pauses (rounds ask for no
// guesses: plain decode steps). While paused, a probe round asks for guesses again after kFirstProbeInterval
// rounds, then after twice as many each time a probe keeps less than kResumeFrom of its guesses (up to
// kLastProbeInterval); a probe that keeps that many resumes drafting. A round that asks and gets no guess from
// the drafter (no match) decides nothing: a probe stays due. With a drafter that costs nothing to ask
// (Drafter::costs_nothing: prompt lookup) there are no probes: every paused round asks it for one guess and
// checks it against the token plain decoding gives next (shadow_checked), and the first right guess resumes
// drafting, so text that starts to follow the input again (a grounded answer after a free-written preamble) is
// picked up at once, and free writing costs no verification batches. Only speed changes: every round's token
// is plain decoding's.
class DraftLengthPolicy {
public:
    static constexpr double kAcceptanceWeight = 0.5;
    static constexpr double kPauseBelow = 0.3;
    static constexpr double kResumeFrom = 0.5;
    static constexpr int32_t kFirstProbeInterval = 4;
    static constexpr int32_t kLastProbeInterval = 64;

    DraftLengthPolicy() = default;
    // shadow_checks: the drafter costs nothing to ask (above).
    DraftLengthPolicy(const SpeculationOptions& options, bool shadow_checks);
    // The guesses to ask the drafter for in the next round (one call per round); 0: none (paused).
    int32_t round_length();
    // The round's guesses were verified: `drafted` (>= 1) of them, `accepted` kept.
    void verified(size_t drafted, size_t accepted);
    // Whether this round (round_length() gave 0) asks the drafter for one unverified guess to check.
    bool wants_shadow_guess() const { return paused_ && shadow_checks_; }
    // That guess was (or was not) the token decoded next. A right one resumes drafting.
    void shadow_checked(bool right);
    bool paused() const { return paused_; }
    double acceptance() const { return acceptance_; }

private:
    void update_acceptance(double rate);  // a verified round while drafting; pauses below kPauseBelow

    SpeculationOptions options_;
    bool shadow_checks_ = false;
    int32_t length_ = kFirstDraftLength;
    double acceptance_ = 1.0;
    bool paused_ = false;
    int32_t rounds_paused_ = 0;  // since the pause or the last probe
    int32_t probe_interval_ = kFirstProbeInterval;
};

// Throws Error(unsupported) naming the reason when speculation cannot be exact on `state` (see above).
void check_speculation_supported(const State& state);

}  // namespace kvstash
