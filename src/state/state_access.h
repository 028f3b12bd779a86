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
#include "kv/recurrent_state.h"
#include "kvstash/sampler_state.h"
#include "kvstash/state.h"

namespace kvstash {

struct State::Impl {
    const Model* model = nullptr;
    int64_t n_ctx = 0;
    StateOptions options;
    std::vector<int32_t> tokens;
    // The KV and recurrent state of the first kv.n_tokens() tokens ("evaluated"); tokens past that
    // (after a truncate() of a recurrent model) wait for the next eval to be evaluated again.
    KvCache kv;
    RecurrentState recurrent;                      // empty without recurrent layers
    std::vector<RecurrentCheckpoint> checkpoints;  // ascending pos, all <= kv.n_tokens(), none at 0
    std::vector<int64_t> wanted_checkpoints;       // positions > kv.n_tokens() to take a checkpoint at
    std::vector<float> last_logits;                // (n_vocab) or empty
    std::optional<SamplerState> sampler;
    // False when the KV is not what evaluating the tokens computes (decoded from a lossy q8_0 state file,
    // or continued from such KV): the prefix cache, whose blocks must be exact, never takes it.
    bool kv_exact = true;
    int64_t sliding_window = 0;  // the model's (0: no sliding-window layers)
    // Speculative decoding: while >= 0, the positions from here on are guesses that may be cut, and the
    // sliding layers are trimmed as if the state ended here (StateAccess::hold_trim_for_guesses).
    int64_t trim_held_at = -1;
};

// Friend of State (declared in kvstash/state.h): the only code that reaches State::Impl. It offers the
// operations its users need (the evaluator advancing States, the state-file reader/writer, the prefix
// cache), not the fields; what State's public methods give (tokens, logits, sampler) is read there.
struct StateAccess {
    static const Model* model(const State& state) { return state.impl_->model; }
    static const KvCache& kv(const State& state) { return state.impl_->kv; }
    // False when the KV is not what evaluating the tokens computes (see State::Impl::kv_exact).
    static bool kv_exact(const State& state) { return state.impl_->kv_exact; }
    static int64_t sliding_window(const State& state) { return state.impl_->sliding_window; }
    static void set_kv_exact(State& state, bool exact) { state.impl_->kv_exact = exact; }

    // Evaluator. pending(): tokens to evaluate again before new ones (after a truncate of a recurrent
    // model). grow(n): make n more positions after the evaluated ones writable (tokens' capacity
    // reserved, so that commit cannot throw) and return the KV to write them into; the recurrent state
    // (advanced in place) is recurrent(). Then either commit the new tokens (and checkpoints taken on the
    // way) or roll back to the evaluated count `first` before grow.
    static int64_t n_evaluated(const State& state) { return state.impl_->kv.n_tokens(); }
    static std::span<const int32_t> pending(const State& state) {
        const State::Impl& s = *state.impl_;
        return std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.kv.n_tokens()));
    }
    static KvCache& grow(State& state, int64_t n) {
        State::Impl& s = *state.impl_;
        s.tokens.reserve(s.tokens.size() + static_cast<size_t>(n));
        s.kv.grow(s.kv.n_tokens() + n);
        return s.kv;
    }
    static RecurrentState& recurrent(State& state) { return state.impl_->recurrent; }
    static const StateOptions& options(const State& state) { return state.impl_->options; }
    // A checkpoint to take when evaluation passes `pos` (besides the interval's), e.g. where a prompt
    // leaves a cached one (the prefix cache); the evaluator takes and forgets it.
    static void want_checkpoint(State& state, int64_t pos) { state.impl_->wanted_checkpoints.push_back(pos); }
    static std::vector<int64_t>& wanted_checkpoints(State& state) { return state.impl_->wanted_checkpoints; }
    static const std::vector<RecurrentCheckpoint>& checkpoints(const State& state) { return state.impl_->checkpoints; }
    static const RecurrentState& recurrent(const State& state) { return state.impl_->recurrent; }
    static void roll_back(State& state, int64_t first);
    // Recurrent models: the evaluated part back to the last checkpoint at or before n (the zero state if
    // none); and the checkpoint budget applied (StateOptions::checkpoint_memory).
    static void rewind_recurrent(State::Impl& s, int64_t n);
    static void thin_checkpoints(State::Impl& s);
    // Sliding-window models: releases the sliding layers' KV that no later position reads (see
    // StateOptions::trim_sliding_window), and whether the KV can continue after the first n positions
    // (the window before n is all there).
    static void trim_sliding(State::Impl& s);
    // Speculative decoding (its verification evaluates guesses that may then be cut): positions from
    // `first_guess` on are guesses. Until settle_guesses(), trimming goes no further than a state ending at
    // first_guess would trim, so cutting any of the guesses leaves the sliding layers' KV exactly as plain
    // decoding's (a trim releases a block for good: nothing plain decoding still holds may go). settle:
    // the hold ends, and the state is trimmed as plain decoding would at its length now (trims depend on
    // the length alone, whole blocks, monotonically: so the result is plain decoding's). No-ops for
    // models without sliding-window layers.
    static void hold_trim_for_guesses(State& state, int64_t first_guess) { state.impl_->trim_held_at = first_guess; }
    static void settle_guesses(State& state) {
        state.impl_->trim_held_at = -1;
        trim_sliding(*state.impl_);
    }
    static bool kv_continues_at(const State::Impl& s, int64_t n) {
        return s.kv.trimmed_until() == 0 || s.kv.trimmed_until() <= n - s.sliding_window + 1;
    }
    static void commit(State& state, std::span<const int32_t> new_tokens, std::vector<float> last_logits,
                       std::vector<RecurrentCheckpoint> checkpoints);

    // Prefix cache: the State becomes `tokens` with their KV in `blocks` (shared, see
    // KvCache::assign_blocks).
    static void adopt(State& state, std::span<const int32_t> tokens, std::vector<std::shared_ptr<KvBlock>> blocks) {
        State::Impl& s = *state.impl_;
        s.tokens.assign(tokens.begin(), tokens.end());
        s.kv.assign_blocks(std::move(blocks), static_cast<int64_t>(tokens.size()));
    }
    // Recurrent models: as above, with the recurrent state after `tokens` (shared: copied on the first
    // write), also kept as the State's first checkpoint so that truncating to it re-evaluates nothing.
    static void adopt(State& state, std::span<const int32_t> tokens, std::vector<std::shared_ptr<KvBlock>> blocks,
                      RecurrentState recurrent) {
        adopt(state, tokens, std::move(blocks));
        State::Impl& s = *state.impl_;
        s.checkpoints.clear();
        if (!tokens.empty())
            s.checkpoints.push_back(RecurrentCheckpoint{static_cast<int64_t>(tokens.size()), recurrent});
        s.recurrent = std::move(recurrent);
    }

    // State-file reader: a fresh State's KV to decode into (its n_tokens() becomes the evaluated count),
    // then what the file holds besides: all tokens (evaluated ones first, then any pending), the
    // recurrent state after the evaluated ones and the checkpoints (ascending, in [1, evaluated]).
    static KvCache& kv_to_restore(State& state) { return state.impl_->kv; }
    static void restore(State& state, std::vector<int32_t> tokens, std::vector<float> last_logits,
                        std::optional<SamplerState> sampler, bool kv_exact, RecurrentState recurrent,
                        std::vector<RecurrentCheckpoint> checkpoints) {
        State::Impl& s = *state.impl_;
        s.tokens = std::move(tokens);
        s.last_logits = std::move(last_logits);
        s.sampler = std::move(sampler);
        s.kv_exact = kv_exact;
        if (!recurrent.empty()) s.recurrent = std::move(recurrent);
        s.checkpoints = std::move(checkpoints);
        thin_checkpoints(s);  // a no-op for a file this kvstash wrote
    }
};

}  // namespace kvstash
