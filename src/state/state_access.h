// The one internal way into a State: what it holds (State::Impl) and StateAccess, the named operations
// that the evaluator (advancing States), the state-file reader/writer and the prefix cache use on it.
// Everything else goes through State's public methods. src/ only: never include from include/kvstash/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
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

// Friend of State (declared in kvstash/state.h): the only code that reaches State::Impl. It offers the
// operations its users need (the evaluator advancing States, the state-file reader/writer, the prefix
// cache), not the fields; what State's public methods give (tokens, logits, sampler) is read there.
struct StateAccess {
    static const Model* model(const State& state) { return state.impl_->model; }
    static const KvCache& kv(const State& state) { return state.impl_->kv; }
    // False when the KV is not what evaluating the tokens computes (see State::Impl::kv_exact).
    static bool kv_exact(const State& state) { return state.impl_->kv_exact; }
    static void set_kv_exact(State& state, bool exact) { state.impl_->kv_exact = exact; }

    // Evaluator: make n_new more positions writable (tokens' capacity reserved, so that commit cannot
    // throw) and return the KV to write them into; then either commit or roll back to `first`.
    static KvCache& grow(State& state, int64_t n_new) {
        State::Impl& s = *state.impl_;
        const int64_t first = static_cast<int64_t>(s.tokens.size());
        s.tokens.reserve(static_cast<size_t>(first + n_new));
        s.kv.grow(first + n_new);
        return s.kv;
    }
    static void roll_back(State& state, int64_t first) { state.impl_->kv.truncate(first); }
    static void commit(State& state, std::span<const int32_t> tokens, std::vector<float> last_logits) {
        State::Impl& s = *state.impl_;
        s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
        s.last_logits = std::move(last_logits);
    }

    // Prefix cache: the State becomes `tokens` with their KV in `blocks` (shared, see
    // KvCache::assign_blocks).
    static void adopt(State& state, std::span<const int32_t> tokens, std::vector<std::shared_ptr<KvBlock>> blocks) {
        State::Impl& s = *state.impl_;
        s.tokens.assign(tokens.begin(), tokens.end());
        s.kv.assign_blocks(std::move(blocks), static_cast<int64_t>(tokens.size()));
    }

    // State-file reader: a fresh State's KV to decode into, then what the file holds besides.
    static KvCache& kv_to_restore(State& state) { return state.impl_->kv; }
    static void restore(State& state, std::vector<int32_t> tokens, std::vector<float> last_logits,
                        std::optional<SamplerState> sampler, bool kv_exact) {
        State::Impl& s = *state.impl_;
        s.tokens = std::move(tokens);
        s.last_logits = std::move(last_logits);
        s.sampler = std::move(sampler);
        s.kv_exact = kv_exact;
    }
};

}  // namespace kvstash
