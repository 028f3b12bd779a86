// One sequence in the scheduler: a prompt being evaluated (in chunks), then one choice being generated
// a token per step. Holds its own State, Sampler and TextStream, so serving it alongside others gives
// exactly what serving it alone gives.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "engine/text_stream.h"
#include "kvstash/grammar.h"
#include "kvstash/sampler.h"
#include "kvstash/speculative.h"
#include "kvstash/state.h"
#include "server/job.h"

namespace kvstash::server {

// What several sequences of one job share: the job itself and its usage tally.
struct JobProgress {
    std::unique_ptr<GenerationJob> job;
    Usage usage;
    int slots = 1;                     // sequence slots reserved at admission, given back when the job ends
    int live_sequences = 0;            // sequences of this job not finished yet
    bool failed = false;               // an error was sent (or the client left); nothing more is sent
    std::shared_ptr<State> prefilled;  // prefill jobs: the state handed back with `done`
};

struct Sequence {
    std::shared_ptr<JobProgress> job;
    State state;
    int choice = 0;
    int64_t prompt_done = 0;  // of job->job->prompt (prefill phase while < prompt.size())
    // Generation phase:
    std::optional<Sampler> sampler;
    std::optional<TextStream> stream;
    std::shared_ptr<GrammarConstraint> constraint;  // the job's grammar, this choice's position in it; null: none
    std::vector<float> masked_logits;               // scratch: the logits with disallowed tokens at -inf
    int64_t generated = 0;
    std::optional<int32_t> next_token;  // sampled, to evaluate at the next step
    // Speculative decoding (null drafter: none): a decode step evaluates next_token and the drafter's guesses
    // together (server/speculative_step.h); the draft length (and its pause) adapts per sequence.
    std::shared_ptr<Drafter> drafter;
    SpeculationOptions speculation;
    DraftLengthPolicy draft_policy;
    std::optional<int32_t> shadow_guess;  // paused: the drafter's unverified guess for the token sampled next
    std::vector<int32_t> step_tokens;     // this step's tokens: next_token, then the guesses
    std::vector<float> step_logits;       // (step_tokens.size() × n_vocab) rows, when there are guesses
    bool finished = false;
    bool state_taken = false;  // `state` was moved out (into a choice or a prefill result)

    explicit Sequence(State s) : state(std::move(s)) {}
    bool prefilling() const { return prompt_done < static_cast<int64_t>(job->job->prompt.size()); }
};

// Samples the next token of a sequence in its generation phase from its State's last logits and sends
// the text that became ready (and the token's logprob) on the job's channel; sends `finish` when the
// sequence ends (end of generation / stop string: "stop"; max_tokens / context full: "length"). Mirrors
// generate(): a token that would not fit the context is never sampled.
void sample_step(Sequence& seq);
// The same from `logits` after `history` (the sequence's decided tokens; its State may hold guesses past
// them, server/speculative_step.h).
void sample_step(Sequence& seq, std::span<const float> logits, std::span<const int32_t> history);

// The token's log-probability and the `top` most likely tokens, from raw logits (log-softmax; the
// normalising sum runs in id order, in double).
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top);

}  // namespace kvstash::server
