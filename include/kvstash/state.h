// The state of one sequence: its tokens, their KV cache and the last position's logits.
//
//   kvstash::State state(*model, {.kv_type = kvstash::KvType::f16, .n_ctx = 4096});
//   evaluator.eval(state, tokens);            // evaluator.h
//   kvstash::State branch = state.fork();     // shares the KV blocks (copy-on-write)
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "kvstash/error.h"
#include "kvstash/kv_type.h"
#include "kvstash/model.h"
#include "kvstash/sampler_state.h"

namespace kvstash {

struct StateOptions {
    KvType kv_type = KvType::f16;  // f16 or f32 (q8_0 is a state-file storage type only)
    int64_t n_ctx = 0;             // maximum tokens; 0 = the model's training context length
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
    // Rewinds to the first n tokens.
    void truncate(int64_t n);

    int64_t n_tokens() const;
    int64_t n_ctx() const;
    KvType kv_type() const;  // the KV cache's element type: f16 or f32
    // Bytes of KV memory the state references (K + V of its blocks, shared ones included).
    uint64_t kv_bytes() const;
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
