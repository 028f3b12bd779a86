// A generating sequence's decode step with speculative decoding (kvstash/speculative.h), inside
// continuous batching: before the step, the sequence's pending token and its drafter's guesses become its
// share of the batch (per-sequence draft length); after it, each row is sampled by sample_step in order,
// exactly as plain steps would sample them, and the guesses after the first wrong one are cut from the
// State. A sequence without a drafter takes one token, as before.
#pragma once

#include <cstdint>

#include "server/sequence.h"

namespace kvstash::server {

// Fills seq.step_tokens: next_token (set), then up to the sequence's draft length of guesses (fewer near
// max_tokens or the end of the context, none below speculation.min_draft).
void prepare_decode(Sequence& seq);

struct DecodeCount {
    int64_t sampled = 0;   // tokens sampled this step
    int64_t drafted = 0;   // guesses verified
    int64_t accepted = 0;  // of them, kept
};

// After the step evaluated seq.step_tokens (with step_logits when there were guesses): samples as
// sample_step, row by row, while the guesses hold.
DecodeCount finish_decode(Sequence& seq);

}  // namespace kvstash::server
