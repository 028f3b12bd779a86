// The state of one sequence: its tokens, their KV cache and the last position's logits.
//
//   kvstash::State state(*model, {.kv_type = kvstash::KvType::f16, .n_ctx = 4096});
//   evaluator.eval(state, tokens);            // evaluator.h
//   kvstash::State branch = state.fork();     // shares the KV blocks (copy-on-write)
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/kv_type.h"
#include "kvstash/model.h"
#include "kvstash/sampler_state.h"

namespace kvstash {

class AdapterSet;  // kvstash/adapter.h

struct StateOptions {
    KvType kv_type = KvType::f16;  // f16, f32 or q8_0 (q8_0: head_dim a multiple of 32; docs/kv-cache.md)
    int64_t n_ctx = 0;             // maximum tokens; 0 = the model's training context length
    // Models with recurrent layers (Mamba, hybrids), whose state cannot be cut back: a copy of the
    // recurrent state is kept every checkpoint_interval tokens (and where checkpoint() is called), so
    // that truncate() re-evaluates at most that many tokens. At most checkpoint_memory bytes of copies
    // are kept per state (at least one), thinned out where they lie closest together. Copies are shared
    // with forks. ModelInfo::recurrent_state_bytes is the size of one (docs/recurrent.md gives figures).
    int64_t checkpoint_interval = 256;
    uint64_t checkpoint_memory = uint64_t{256} << 20;
    // LoRA / control vectors this sequence is computed under (kvstash/adapter.h), loaded for the same
    // Model; null or empty = the model alone. Fixed for the State's life (forks share it): a State under
    // other adapters is another State (its KV differs from the first token on).
    std::shared_ptr<const AdapterSet> adapters = nullptr;
    // Models with sliding-window layers (Gemma 3): after each eval, those layers' KV that no later
    // position reads is released (whole 32-position blocks), keeping the window plus
    // sliding_window_slack positions (-1: one more window), so that a state holds O(window) KV for them.
    // truncate() back within the slack is free; further back re-evaluates from the start (bit-exactly;
    // truncate_floor() says where). false: keep everything (the prefix cache's States).
    bool trim_sliding_window = true;
    int64_t sliding_window_slack = -1;
};

// Everything needed to continue a sequence: its tokens, their KV cache and the last position's logits.
// Caller-owned; copies are explicit (fork()).
class State {
public:
    explicit State(const Model& model, StateOptions options = {});
    ~State();
    State(State&&) noexcept;
    State& operator=(State&&) noexcept;
    State(const State&) = delete;
    State& operator=(const State&) = delete;

    // A new state sharing this one's KV blocks (copy-on-write); cost independent of the prefix length.
    State fork() const;
    // Rewinds to the first n tokens. With recurrent layers: back to the last checkpoint at or before n;
    // the tokens from there to n are evaluated again (bit-exactly) by the next eval(). With trimmed
    // sliding-window layers and n < truncate_floor(): all n tokens are evaluated again (bit-exactly).
    void truncate(int64_t n);
    // Recurrent models: keeps a copy of the recurrent state at the current position (O(1); the next
    // write copies it once), e.g. at a chat turn's start so that undoing the turn re-evaluates nothing.
    // While tokens wait for re-evaluation (after a truncate), it is taken when the next eval passes this
    // position. No-op for models without recurrent layers.
    void checkpoint();

    int64_t n_tokens() const;
    int64_t n_ctx() const;
    KvType kv_type() const;  // the KV cache's element type: f16, f32 or q8_0
    // The adapter set it is computed under (StateOptions::adapters); null when none.
    const std::shared_ptr<const AdapterSet>& adapters() const;
    // Bytes of KV memory the state references (K + V of its blocks, shared ones included).
    uint64_t kv_bytes() const;
    // Bytes of recurrent state the state references: its own and its checkpoints' (0 without recurrent layers).
    uint64_t recurrent_bytes() const;
    // Checkpoint positions (ascending; recurrent models), and how many tokens at the end are waiting
    // to be evaluated again after a truncate().
    std::vector<int64_t> checkpoint_positions() const;
    int64_t n_pending() const;
    // Sliding-window models: the smallest n for which truncate(n) keeps the KV (evaluates nothing again);
    // below it the sliding layers' window is gone and the next eval() starts over from position 0. 0 when
    // nothing was trimmed (and for other models).
    int64_t truncate_floor() const;
    std::span<const int32_t> tokens() const;
    // Logits (n_vocab) after the last token; empty before the first eval().
    std::span<const float> last_logits() const;
    // The sampler's state once generation has started on this sequence (kept with the state so that a
    // saved state continues the same random sequence); null before.
    const SamplerState* sampler_state() const;
    void set_sampler_state(const SamplerState& sampler);

private:
    State();
    struct Impl;
    friend struct StateAccess;  // the library's own access to Impl (src/state/state_access.h)
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash
