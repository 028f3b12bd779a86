// The one internal way into a State: what it holds (State::Impl) and StateAccess, the accessor that the
// evaluator (advancing States), the state-file reader/writer and the prefix cache use to edit it.
// Everything else goes through State's public methods. src/ only: never include from include/kvstash/.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kv/kv_cache.h"
#include "kvstash/sampler_state.h"
#include "kvstash/state.h"

namespace kvstash {

struct State::Impl {
    const Model* model = nullptr;
    int64_t n_ctx = 0;
    std::vector<int32_t> tokens;
    KvCache kv;
    std::vector<float> last_logits;  // (n_vocab) or empty
    std::optional<SamplerState> sampler;
    // False when the KV is not what evaluating the tokens computes (decoded from a lossy q8_0 state file,
    // or continued from such KV): the prefix cache, whose blocks must be exact, never takes it.
    bool kv_exact = true;
};

// Friend of State (declared in kvstash/state.h): the only code that reaches State::Impl.
struct StateAccess {
    using Impl = State::Impl;
    static Impl& impl(State& state) { return *state.impl_; }
    static const Impl& impl(const State& state) { return *state.impl_; }
};

using StateImpl = StateAccess::Impl;

}  // namespace kvstash
