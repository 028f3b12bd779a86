// PrefixCache: key the request outside the lock, look up / insert / evict under it, build the State.
// The disk tier's file I/O also runs outside the lock (the tier has its own).
#include "kvstash/prefix_cache.h"

#include <mutex>

#include "engine/prefix_cache_disk.h"
#include "engine/prefix_cache_index.h"
#include "engine/prefix_cache_key.h"
#include "kvstash/error.h"
#include "state/fingerprint.h"
#include "state/state_access.h"

namespace kvstash {

namespace {

// An empty KvCache of the model's block shape for `type`: the disk tier forks it to allocate a block.
KvCache block_shape(const Model& model, KvType type) {
    const ModelInfo& info = model.info();
    return KvCache(info.n_kv_layers, info.n_embd_kv(), type);
}

BlockFileIdentity file_identity(const ModelFingerprint& fingerprint, KvType type, const KvCache& shape) {
    BlockFileIdentity id;
    id.model = fingerprint;
    id.kv_type = kv_block_code(type);
    id.isa = static_cast<uint32_t>(active_isa());
    id.n_layer = static_cast<uint32_t>(shape.n_layer());
    id.row_bytes = shape.row_bytes();
    return id;
}

}  // namespace

struct PrefixCache::Impl {
    Impl(const Model& m, PrefixCacheOptions o)
        : model(m),
          options(o),
          fingerprint(cached_model_fingerprint(m)),
          f16(fingerprint, KvType::f16, active_isa()),
          f32(fingerprint, KvType::f32, active_isa()),
          shape_f16(block_shape(m, KvType::f16)),
          shape_f32(block_shape(m, KvType::f32)),
          id_f16(file_identity(fingerprint, KvType::f16, shape_f16)),
          id_f32(file_identity(fingerprint, KvType::f32, shape_f32)) {
        if (!options.disk_dir.empty())
            disk = std::make_unique<PrefixDiskTier>(options.disk_dir, options.disk_budget_bytes);
    }

    const PrefixKeyDomain& domain(KvType type) const { return type == KvType::f16 ? f16 : f32; }
    const KvCache& shape(KvType type) const { return type == KvType::f16 ? shape_f16 : shape_f32; }
    const BlockFileIdentity& file_id(KvType type) const { return type == KvType::f16 ? id_f16 : id_f32; }

    // Reads keys[first], keys[first + 1], ... from disk until one is missing; the blocks found.
    std::vector<std::shared_ptr<KvBlock>> load_from_disk(KvType type, std::span<const BlockKey> keys, size_t first,
                                                         std::span<const int32_t> tokens) const;

    const Model& model;
    const PrefixCacheOptions options;
    const ModelFingerprint fingerprint;
    const PrefixKeyDomain f16, f32;
    const KvCache shape_f16, shape_f32;
    const BlockFileIdentity id_f16, id_f32;
    std::unique_ptr<PrefixDiskTier> disk;  // null without disk_dir; thread-safe on its own

    mutable std::mutex mutex;
    PrefixIndex index;          // guarded by mutex
    PrefixCacheStats counters;  // guarded by mutex; the byte figures are filled in by stats()
};

std::vector<std::shared_ptr<KvBlock>> PrefixCache::Impl::load_from_disk(KvType type, std::span<const BlockKey> keys,
                                                                        size_t first,
                                                                        std::span<const int32_t> tokens) const {
    std::vector<std::shared_ptr<KvBlock>> blocks;
    for (size_t i = first; i < keys.size(); ++i) {
        const BlockFileName name{keys[i], i == 0 ? domain(type).root() : keys[i - 1],
                                 tokens.subspan(i * kv_block_tokens).first<kv_block_tokens>()};
        std::shared_ptr<KvBlock> block = disk->load(name, file_id(type), shape(type));
        if (!block) break;
        blocks.push_back(std::move(block));
    }
    return blocks;
}

PrefixCache::PrefixCache(const Model& model, PrefixCacheOptions options)
    : impl_(std::make_unique<Impl>(model, options)) {}

PrefixCache::~PrefixCache() = default;

CachedPrefix PrefixCache::acquire(std::span<const int32_t> tokens, StateOptions options) {
    CachedPrefix result{State(impl_->model, options)};
    const auto n = static_cast<int64_t>(tokens.size());
    // Models with recurrent layers: their blocks would need recurrent checkpoints, which the cache does
    // not hold yet; nothing is reused (and release() stores nothing).
    if (n == 0 || impl_->model.info().n_recurrent_layers > 0) {
        result.tokens_to_evaluate = n;
        return result;
    }
    // Leave at least one token to evaluate (the State keeps no logits), and stay within the context.
    const int64_t limit = std::min(n - 1, result.state.n_ctx());
    const PrefixKeyDomain& domain = impl_->domain(options.kv_type);
    const std::vector<BlockKey> keys = domain.chain(tokens, limit / kv_block_tokens);

    PrefixIndex::Match match;
    {
        const std::lock_guard lock(impl_->mutex);
        match = impl_->index.lookup(domain.root(), keys, tokens, limit);
    }
    // The run of full blocks in RAM ended early: continue it from disk. Blocks read back join the index
    // as if released, and the lookup is repeated so it can end in a partial match past them. `match`
    // pins the RAM blocks meanwhile, so none of them is evicted.
    const size_t ram_full = match.blocks.size() - (match.partial_block ? 1 : 0);
    const bool look_on_disk = impl_->disk && ram_full < keys.size();
    std::vector<std::shared_ptr<KvBlock>> from_disk;
    if (look_on_disk) from_disk = impl_->load_from_disk(options.kv_type, keys, ram_full, tokens);
    {
        const std::lock_guard lock(impl_->mutex);
        PrefixCacheStats& c = impl_->counters;
        if (!from_disk.empty()) {
            const size_t n_full = ram_full + from_disk.size();
            std::vector<std::shared_ptr<KvBlock>> chain(match.blocks.begin(),
                                                        match.blocks.begin() + static_cast<std::ptrdiff_t>(ram_full));
            chain.insert(chain.end(), from_disk.begin(), from_disk.end());
            c.blocks_inserted +=
                impl_->index.insert(domain.root(), std::span(keys).first(n_full), tokens, std::move(chain));
            match = impl_->index.lookup(domain.root(), keys, tokens, limit);
        } else if (look_on_disk) {
            ++c.disk_misses;
        }
        ++c.lookups;
        ++(match.n_tokens > 0 ? c.hits : c.misses);
        if (match.partial_block) ++c.partial_block_hits;
        c.tokens_reused += static_cast<uint64_t>(match.n_tokens);
        c.tokens_computed += static_cast<uint64_t>(n - match.n_tokens);
        // States that finished since the last call may have unpinned blocks; the matched ones are pinned
        // by `match` while this runs.
        c.evictions += impl_->index.evict_to(impl_->options.ram_budget_bytes);
    }

    StateAccess::adopt(result.state, tokens.first(static_cast<size_t>(match.n_tokens)), std::move(match.blocks));
    result.reused_tokens = match.n_tokens;
    result.tokens_to_evaluate = n - match.n_tokens;
    result.partial_block = match.partial_block;
    return result;
}

void PrefixCache::release(const State& state) {
    const Model* model = StateAccess::model(state);
    const KvCache& kv = StateAccess::kv(state);
    const bool same_model =
        model == &impl_->model || (model != nullptr && cached_model_fingerprint(*model) == impl_->fingerprint);
    if (!same_model || !StateAccess::kv_exact(state) || model->info().n_recurrent_layers > 0) {
        const std::lock_guard lock(impl_->mutex);
        ++impl_->counters.releases_rejected;
        return;
    }
    if (kv.n_tokens() != state.n_tokens())
        throw Error(ErrorCode::internal, "PrefixCache::release: a State whose KV and tokens disagree");
    const int64_t n_full = state.n_tokens() / kv_block_tokens;
    const PrefixKeyDomain& domain = impl_->domain(kv.kv_type());
    const std::vector<BlockKey> keys = domain.chain(state.tokens(), n_full);
    std::vector<std::shared_ptr<KvBlock>> blocks;
    blocks.reserve(static_cast<size_t>(n_full));
    for (int64_t b = 0; b < n_full; ++b) blocks.push_back(kv.share_block(b));

    {
        const std::lock_guard lock(impl_->mutex);
        impl_->counters.blocks_inserted += impl_->index.insert(domain.root(), keys, state.tokens(), blocks);
        impl_->counters.evictions += impl_->index.evict_to(impl_->options.ram_budget_bytes);
    }
    // Write-through (see the header): `blocks` keeps each block alive and unchanged (shared, so
    // copy-on-write) while it is written, even if the index evicted it just now.
    if (!impl_->disk) return;
    const KvType type = kv.kv_type();
    for (size_t b = 0; b < blocks.size(); ++b) {
        const BlockFileName name{keys[b], b == 0 ? domain.root() : keys[b - 1],
                                 std::span(state.tokens()).subspan(b * kv_block_tokens).first<kv_block_tokens>()};
        impl_->disk->store(name, impl_->file_id(type), *blocks[b]);
    }
}

PrefixCacheStats PrefixCache::stats() const {
    const std::lock_guard lock(impl_->mutex);
    PrefixCacheStats stats = impl_->counters;
    stats.blocks_held = impl_->index.blocks();
    stats.bytes_held = impl_->index.bytes();
    stats.bytes_in_use = impl_->index.bytes_in_use();
    stats.ram_budget_bytes = impl_->options.ram_budget_bytes;
    if (impl_->disk) impl_->disk->fill(stats);
    return stats;
}

}  // namespace kvstash
