#include "kvstash/state.h"

#include <algorithm>

#include "kvstash/adapter.h"
#include "kvstash/error.h"
#include "kvstash/model.h"
#include "model/model_access.h"
#include "state/state_access.h"

namespace kvstash {

// Recurrent models: the evaluated part goes back to the last checkpoint at or before n (the zero
// state at 0 if none); later checkpoints are dropped. Tokens up to n stay, to be evaluated again.
void StateAccess::rewind_recurrent(State::Impl& s, int64_t n) {
    auto& cps = s.checkpoints;
    cps.erase(std::find_if(cps.begin(), cps.end(), [n](const RecurrentCheckpoint& c) { return c.pos > n; }), cps.end());
    if (cps.empty()) {
        s.recurrent = RecurrentState(s.recurrent.shape());
        s.kv.truncate(0);
    } else {
        s.recurrent = cps.back().state;  // shared; copied on the next write
        s.kv.truncate(cps.back().pos);
    }
}

// Keeps at most max(1, checkpoint_memory / state bytes) checkpoints: drops the one closest to its
// predecessor (position 0 counts as one), the older on ties, never the newest.
void StateAccess::thin_checkpoints(State::Impl& s) {
    auto& cps = s.checkpoints;
    const uint64_t each = std::max<uint64_t>(s.recurrent.bytes(), 1);
    const auto max_count = static_cast<size_t>(std::max<uint64_t>(s.options.checkpoint_memory / each, 1));
    while (cps.size() > max_count) {
        size_t drop = 0;
        int64_t best_gap = -1;
        for (size_t i = 0; i + 1 < cps.size(); ++i) {
            const int64_t gap = cps[i].pos - (i == 0 ? 0 : cps[i - 1].pos);
            if (best_gap < 0 || gap < best_gap) best_gap = gap, drop = i;
        }
        cps.erase(cps.begin() + static_cast<std::ptrdiff_t>(drop));
    }
}

void StateAccess::trim_sliding(State::Impl& s) {
    if (s.sliding_window <= 0 || !s.options.trim_sliding_window) return;
    const int64_t slack = s.options.sliding_window_slack < 0 ? s.sliding_window : s.options.sliding_window_slack;
    // The next position evaluated, kv.n_tokens(), reads keys from n_tokens - window + 1 on; truncating
    // back by `slack` needs `slack` more. While guesses are held (hold_trim_for_guesses), as if the state
    // ended before them.
    const int64_t n = s.trim_held_at >= 0 ? std::min(s.trim_held_at, s.kv.n_tokens()) : s.kv.n_tokens();
    s.kv.trim_sliding(n - s.sliding_window + 1 - slack);
}

void StateAccess::roll_back(State& state, int64_t first) {
    State::Impl& s = *state.impl_;
    if (s.recurrent.empty()) {
        s.kv.truncate(first);
    } else {
        rewind_recurrent(s, first);  // the recurrent state was advanced in place: back to a checkpoint
    }
}

void StateAccess::commit(State& state, std::span<const int32_t> new_tokens, std::vector<float> last_logits,
                         std::vector<RecurrentCheckpoint> checkpoints) {
    State::Impl& s = *state.impl_;
    s.tokens.insert(s.tokens.end(), new_tokens.begin(), new_tokens.end());
    s.last_logits = std::move(last_logits);
    const int64_t evaluated = s.kv.n_tokens();
    std::erase_if(s.wanted_checkpoints, [evaluated](int64_t pos) { return pos <= evaluated; });
    trim_sliding(s);
    if (checkpoints.empty()) return;
    for (RecurrentCheckpoint& c : checkpoints) {
        if (c.pos > 0 && (s.checkpoints.empty() || c.pos > s.checkpoints.back().pos)) {
            s.checkpoints.push_back(std::move(c));
        }
    }
    StateAccess::thin_checkpoints(s);
}

State::State() : impl_(std::make_unique<Impl>()) {}

State::State(const Model& model, StateOptions options) : State() {
    const ModelInfo& info = model.info();
    if (options.n_ctx < 0) throw Error(ErrorCode::invalid_argument, "context size must not be negative");
    if (options.kv_type == KvType::q8_0 && ModelAccess::impl(model).config.head_dim % 32 != 0) {
        throw Error(ErrorCode::invalid_argument,
                    "a q8_0 KV cache needs a head size that is a multiple of 32; this model's is " +
                        std::to_string(ModelAccess::impl(model).config.head_dim) + " (use f16 or f32)");
    }
    if (options.checkpoint_interval < 0)
        throw Error(ErrorCode::invalid_argument, "checkpoint interval must not be negative");
    if (options.adapters != nullptr && &options.adapters->model() != &model)
        throw Error(ErrorCode::invalid_argument,
                    "the adapter set was loaded for another Model object than the State's");
    if (options.adapters != nullptr && options.adapters->empty()) options.adapters.reset();
    impl_->model = &model;
    impl_->options = options;
    impl_->n_ctx = options.n_ctx > 0 ? options.n_ctx : (info.n_ctx_train > 0 ? info.n_ctx_train : 4096);
    impl_->options.n_ctx = impl_->n_ctx;
    if (const ModelConfig& config = ModelAccess::impl(model).config;
        config.learned_positions && impl_->n_ctx > config.n_ctx_train) {
        throw Error(ErrorCode::invalid_argument, "context size " + std::to_string(impl_->n_ctx) +
                                                     " exceeds the model's learned position table of " +
                                                     std::to_string(config.n_ctx_train) + " positions");
    }
    impl_->kv = KvCache(info.n_kv_layers, info.n_embd_kv(), options.kv_type);
    if (const ModelConfig& c = ModelAccess::impl(model).config; c.sliding_window > 0 && c.n_kv_layers > 0) {
        std::vector<uint8_t> sliding(static_cast<size_t>(c.n_kv_layers), 0);
        for (int64_t il = 0; il < c.n_layer; ++il) {
            if (!c.is_recurrent(il)) sliding[static_cast<size_t>(c.slot[static_cast<size_t>(il)])] = c.is_swa(il);
        }
        impl_->kv.set_sliding_layers(sliding);
        impl_->sliding_window = c.sliding_window;
    }
    const RecurrentShape shape = ModelAccess::impl(model).config.recurrent_shape();
    if (shape.n_layer > 0) impl_->recurrent = RecurrentState(shape);
}

State::~State() = default;
State::State(State&&) noexcept = default;
State& State::operator=(State&&) noexcept = default;

State State::fork() const {
    State copy;
    copy.impl_->model = impl_->model;
    copy.impl_->n_ctx = impl_->n_ctx;
    copy.impl_->tokens = impl_->tokens;
    copy.impl_->options = impl_->options;
    copy.impl_->kv = impl_->kv.fork();
    copy.impl_->recurrent = impl_->recurrent;  // shared, copied on the first write
    copy.impl_->checkpoints = impl_->checkpoints;
    copy.impl_->wanted_checkpoints = impl_->wanted_checkpoints;
    copy.impl_->last_logits = impl_->last_logits;
    copy.impl_->sampler = impl_->sampler;
    copy.impl_->kv_exact = impl_->kv_exact;
    copy.impl_->sliding_window = impl_->sliding_window;
    return copy;
}

void State::truncate(int64_t n) {
    if (n < 0 || n > n_tokens()) {
        throw Error(ErrorCode::out_of_range, "cannot truncate to " + std::to_string(n) + " tokens: the state holds " +
                                                 std::to_string(n_tokens()));
    }
    if (n == n_tokens()) return;
    if (impl_->recurrent.empty()) {
        // Sliding layers trimmed past n's window: nothing before n can be continued from but position 0,
        // so every token is evaluated again (bit-exactly) by the next eval.
        const int64_t keep = StateAccess::kv_continues_at(*impl_, n) ? n : 0;
        impl_->kv.truncate(std::min(keep, impl_->kv.n_tokens()));  // tokens may already wait (pending)
    } else if (n < impl_->kv.n_tokens()) {
        StateAccess::rewind_recurrent(*impl_, n);
    }
    impl_->tokens.resize(static_cast<size_t>(n));
    // The logits of position n-1 are not stored; the caller re-evaluates the last token to get them.
    impl_->last_logits.clear();
}

void State::checkpoint() {
    State::Impl& s = *impl_;
    if (s.recurrent.empty() || n_tokens() == 0) return;
    if (n_pending() > 0) {  // taken when the next eval passes this position again
        s.wanted_checkpoints.push_back(n_tokens());
        return;
    }
    if (!s.checkpoints.empty() && s.checkpoints.back().pos == s.kv.n_tokens()) return;
    s.checkpoints.push_back(RecurrentCheckpoint{s.kv.n_tokens(), s.recurrent});
    StateAccess::thin_checkpoints(s);
}

uint64_t State::recurrent_bytes() const {
    if (impl_->recurrent.empty()) return 0;
    return impl_->recurrent.bytes() * (1 + impl_->checkpoints.size());
}

std::vector<int64_t> State::checkpoint_positions() const {
    std::vector<int64_t> out;
    for (const RecurrentCheckpoint& c : impl_->checkpoints) out.push_back(c.pos);
    return out;
}

int64_t State::n_pending() const { return n_tokens() - impl_->kv.n_tokens(); }

int64_t State::truncate_floor() const {
    const int64_t trimmed = impl_->kv.trimmed_until();
    return trimmed == 0 ? 0 : trimmed + impl_->sliding_window - 1;
}

int64_t State::n_tokens() const { return static_cast<int64_t>(impl_->tokens.size()); }
int64_t State::n_ctx() const { return impl_->n_ctx; }
KvType State::kv_type() const { return impl_->kv.kv_type(); }
const std::shared_ptr<const AdapterSet>& State::adapters() const { return impl_->options.adapters; }
uint64_t State::kv_bytes() const { return impl_->kv.bytes(); }
std::span<const int32_t> State::tokens() const { return impl_->tokens; }
std::span<const float> State::last_logits() const { return impl_->last_logits; }
const SamplerState* State::sampler_state() const { return impl_->sampler ? &*impl_->sampler : nullptr; }
void State::set_sampler_state(const SamplerState& sampler) { impl_->sampler = sampler; }

}  // namespace kvstash
