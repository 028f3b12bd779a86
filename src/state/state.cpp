#include "kvstash/state.h"
#include "kvstash/error.h"
#include "kvstash/model.h"
#include "state/state_access.h"

namespace kvstash {

State::State() : impl_(std::make_unique<Impl>()) {}

State::State(const Model& model, StateOptions options) : State() {
    const ModelInfo& info = model.info();
    if (options.n_ctx < 0) throw Error(ErrorCode::invalid_argument, "context size must not be negative");
    if (options.kv_type != KvType::f16 && options.kv_type != KvType::f32) {
        throw Error(ErrorCode::invalid_argument, "a State's KV cache type must be f16 or f32, not " +
                                                     std::string(kv_type_name(options.kv_type)) +
                                                     " (q8_0 is a storage type of state files only)");
    }
    impl_->model = &model;
    impl_->n_ctx = options.n_ctx > 0 ? options.n_ctx : (info.n_ctx_train > 0 ? info.n_ctx_train : 4096);
    impl_->kv = KvCache(info.n_layer, info.n_embd_kv(), options.kv_type);
}

State::~State() = default;
State::State(State&&) noexcept = default;
State& State::operator=(State&&) noexcept = default;

State State::fork() const {
    State copy;
    copy.impl_->model = impl_->model;
    copy.impl_->n_ctx = impl_->n_ctx;
    copy.impl_->tokens = impl_->tokens;
    copy.impl_->kv = impl_->kv.fork();
    copy.impl_->last_logits = impl_->last_logits;
    copy.impl_->sampler = impl_->sampler;
    copy.impl_->kv_exact = impl_->kv_exact;
    return copy;
}

void State::truncate(int64_t n) {
    if (n < 0 || n > n_tokens()) {
        throw Error(ErrorCode::out_of_range, "cannot truncate to " + std::to_string(n) + " tokens: the state holds " +
                                                 std::to_string(n_tokens()));
    }
    if (n == n_tokens()) return;
    impl_->kv.truncate(n);
    impl_->tokens.resize(static_cast<size_t>(n));
    // The logits of position n-1 are not stored; the caller re-evaluates the last token to get them.
    impl_->last_logits.clear();
}

int64_t State::n_tokens() const { return static_cast<int64_t>(impl_->tokens.size()); }
int64_t State::n_ctx() const { return impl_->n_ctx; }
KvType State::kv_type() const { return impl_->kv.kv_type(); }
uint64_t State::kv_bytes() const { return static_cast<uint64_t>(impl_->kv.n_blocks()) * impl_->kv.block_bytes(); }
std::span<const int32_t> State::tokens() const { return impl_->tokens; }
std::span<const float> State::last_logits() const { return impl_->last_logits; }
const SamplerState* State::sampler_state() const { return impl_->sampler ? &*impl_->sampler : nullptr; }
void State::set_sampler_state(const SamplerState& sampler) { impl_->sampler = sampler; }

}  // namespace kvstash
