// One sequence's rows in a micro-batch of the forward pass (model/forward.h).
#pragma once

#include <cstdint>
#include <span>

#include "model/adapter_weights.h"

namespace kvstash {

class KvCache;
class RecurrentState;

// A copy of the sequence's recurrent state to take after `row` rows of the segment (0: before the
// first), into `*out` (made with the model's recurrent shape; overwritten).
struct RecurrentSnapshot {
    int64_t row = 0;
    RecurrentState* out = nullptr;
};

// `tokens` at absolute positions first_pos.. of one sequence. `kv` must already have grown to hold
// [first_pos, first_pos + tokens.size()) and hold the sequence's K/V for [0, first_pos); `recurrent`
// (models with recurrent layers) is the state after the first first_pos tokens, advanced in place.
struct ForwardSegment {
    KvCache* kv = nullptr;
    RecurrentState* recurrent = nullptr;
    std::span<const RecurrentSnapshot> snapshots;  // ascending rows
    int64_t first_pos = 0;
    std::span<const int32_t> tokens;
    // Rows logits_from..tokens.size()-1 of this segment get logits, written to `logits`
    // ((tokens.size() - logits_from) × n_vocab, row-major); logits_from == tokens.size(): none.
    int64_t logits_from = 0;
    float* logits = nullptr;
    const AdapterImpl* adapters = nullptr;  // the sequence's LoRA / control vectors; null = none
    // Not null: every row's final-norm hidden state (what the output matrix multiplies; llama.cpp's
    // embedding) is written here, tokens.size() × n_embd, row-major.
    float* hidden = nullptr;
};

}  // namespace kvstash
