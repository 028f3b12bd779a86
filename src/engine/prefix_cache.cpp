// PrefixCache: key the request outside the lock, look up / insert / evict under it, build the State.
#include "kvstash/prefix_cache.h"

#include <mutex>

#include "engine/prefix_cache_index.h"
#include "engine/prefix_cache_key.h"
#include "kvstash/error.h"
#include "state/fingerprint.h"
#include "state/state_impl.h"

namespace kvstash {

struct PrefixCache::Impl {
    Impl(const Model& m, PrefixCacheOptions o)
        : model(m),
          options(o),
          fingerprint(cached_model_fingerprint(m)),
          f16(fingerprint, KvType::f16, active_isa()),
          f32(fingerprint, KvType::f32, active_isa()) {}

    const PrefixKeyDomain& domain(KvType type) const { return type == KvType::f16 ? f16 : f32; }

    const Model& model;
    const PrefixCacheOptions options;
    const ModelFingerprint fingerprint;
    const PrefixKeyDomain f16, f32;

    mutable std::mutex mutex;
    PrefixIndex index;         // guarded by mutex
    PrefixCacheStats counters;  // guarded by mutex; the byte figures are filled in by stats()
};

PrefixCache::PrefixCache(const Model& model, PrefixCacheOptions options) : impl_(std::make_unique<Impl>(model, options)) {}

PrefixCache::~PrefixCache() = default;

CachedPrefix PrefixCache::acquire(std::span<const int32_t> tokens, StateOptions options) {
    CachedPrefix result{State(impl_->model, options)};
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) return result;
    // Leave at least one token to evaluate (the State keeps no logits), and stay within the context.
    const int64_t limit = std::min(n - 1, result.state.n_ctx());
    const PrefixKeyDomain& domain = impl_->domain(options.kv_type);
    const std::vector<BlockKey> keys = domain.chain(tokens, limit / kv_block_tokens);

    PrefixIndex::Match match;
    {
        const std::lock_guard lock(impl_->mutex);
        match = impl_->index.lookup(domain.root(), keys, tokens, limit);
        PrefixCacheStats& c = impl_->counters;
        ++c.lookups;
        ++(match.n_tokens > 0 ? c.hits : c.misses);
        if (match.partial_block) ++c.partial_block_hits;
        c.tokens_reused += static_cast<uint64_t>(match.n_tokens);
        c.tokens_computed += static_cast<uint64_t>(n - match.n_tokens);
        // States that finished since the last call may have unpinned blocks; the matched ones are pinned
        // by `match` while this runs.
        c.evictions += impl_->index.evict_to(impl_->options.ram_budget_bytes);
    }

    State::Impl& s = result.state.impl();
    s.tokens.assign(tokens.begin(), tokens.begin() + match.n_tokens);
    s.kv.assign_blocks(std::move(match.blocks), match.n_tokens);
    result.reused_tokens = match.n_tokens;
    result.tokens_to_evaluate = n - match.n_tokens;
    result.partial_block = match.partial_block;
    return result;
}

void PrefixCache::release(const State& state) {
    const State::Impl& s = state.impl();
    const bool same_model = s.model == &impl_->model || (s.model != nullptr && cached_model_fingerprint(*s.model) == impl_->fingerprint);
    if (!same_model || !s.kv_exact) {
        const std::lock_guard lock(impl_->mutex);
        ++impl_->counters.releases_rejected;
        return;
    }
    if (s.kv.n_tokens() != state.n_tokens()) throw Error(ErrorCode::internal, "PrefixCache::release: a State whose KV and tokens disagree");
    const int64_t n_full = state.n_tokens() / kv_block_tokens;
    const PrefixKeyDomain& domain = impl_->domain(s.kv.type() == TensorType::F16 ? KvType::f16 : KvType::f32);
    const std::vector<BlockKey> keys = domain.chain(state.tokens(), n_full);
    std::vector<std::shared_ptr<KvBlock>> blocks;
    blocks.reserve(static_cast<size_t>(n_full));
    for (int64_t b = 0; b < n_full; ++b) blocks.push_back(s.kv.share_block(b));

    const std::lock_guard lock(impl_->mutex);
    impl_->counters.blocks_inserted += impl_->index.insert(domain.root(), keys, state.tokens(), std::move(blocks));
    impl_->counters.evictions += impl_->index.evict_to(impl_->options.ram_budget_bytes);
}

PrefixCacheStats PrefixCache::stats() const {
    const std::lock_guard lock(impl_->mutex);
    PrefixCacheStats stats = impl_->counters;
    stats.blocks_held = impl_->index.blocks();
    stats.bytes_held = impl_->index.bytes();
    stats.bytes_in_use = impl_->index.bytes_in_use();
    stats.ram_budget_bytes = impl_->options.ram_budget_bytes;
    return stats;
}

}  // namespace kvstash
