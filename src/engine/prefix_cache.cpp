// PrefixCache: key the request outside the lock, look up / insert / evict under it, build the State.
// The disk tier's file I/O also runs outside the lock (the tier has its own).
#include "kvstash/prefix_cache.h"

#include <algorithm>
#include <mutex>

#include "engine/prefix_cache_disk.h"
#include "engine/prefix_cache_index.h"
#include "engine/prefix_cache_key.h"
#include "engine/prefix_cache_redis.h"
#include "kvstash/error.h"
#include "model/model_access.h"
#include "state/adapter_fingerprint.h"
#include "state/fingerprint.h"
#include "state/state_access.h"

namespace kvstash {

namespace {

template <typename T>
const T& pick(KvType type, const T& f16, const T& f32, const T& q8_0) {
    return type == KvType::f16 ? f16 : type == KvType::f32 ? f32 : q8_0;
}

// q8_0 where the model can have a q8_0 cache (head_dim a multiple of 32, state/state.cpp); else f16, a
// stand-in never used (no State of that model has q8_0 blocks to cache).
KvType q8_0_or_f16(const Model& model) {
    return ModelAccess::impl(model).config.head_dim % 32 == 0 ? KvType::q8_0 : KvType::f16;
}

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

// Where the checkpoint after the first `pos` of `tokens` hangs: the key of the full block before it (or
// the root; `keys` are the tokens' full-block keys) and the tokens of the partial block up to it.
struct CheckpointPlace {
    BlockKey parent;
    std::span<const int32_t> partial;
};
CheckpointPlace place_of(const PrefixKeyDomain& domain, std::span<const BlockKey> keys, std::span<const int32_t> tokens,
                         int64_t pos) {
    const int64_t start = pos / kv_block_tokens * kv_block_tokens;
    return {start == 0 ? domain.root() : keys[static_cast<size_t>(start / kv_block_tokens - 1)],
            tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(pos - start))};
}

}  // namespace

// A recurrent checkpoint found for a request: pos == 0 when none.
using FoundCheckpoint = PrefixIndex::CheckpointMatch;

struct PrefixCache::Impl {
    Impl(const Model& m, PrefixCacheOptions o)
        : model(m),
          options(o),
          fingerprint(combined_fingerprint(m, o.adapters.get())),
          f16(fingerprint, KvType::f16, active_isa()),
          f32(fingerprint, KvType::f32, active_isa()),
          shape_f16(block_shape(m, KvType::f16)),
          shape_f32(block_shape(m, KvType::f32)),
          id_f16(file_identity(fingerprint, KvType::f16, shape_f16)),
          id_f32(file_identity(fingerprint, KvType::f32, shape_f32)),
          recurrent_shape(ModelAccess::impl(m).config.recurrent_shape()),
          cid_f16{id_f16, recurrent_shape},
          cid_f32{id_f32, recurrent_shape},
          q8(fingerprint, KvType::q8_0, active_isa()),
          shape_q8(block_shape(m, q8_0_or_f16(m))),
          id_q8(file_identity(fingerprint, KvType::q8_0, shape_q8)),
          cid_q8{id_q8, recurrent_shape} {
        if (!options.disk_dir.empty())
            disk = std::make_unique<PrefixDiskTier>(options.disk_dir, options.disk_budget_bytes);
        if (!options.redis_url.empty()) {
            redis = std::make_unique<PrefixRedisTier>(
                options.redis_url, RedisTimeouts{options.redis_connect_timeout_ms, options.redis_io_timeout_ms},
                options.redis_queue_bytes);
        }
    }

    const PrefixKeyDomain& domain(KvType type) const { return pick(type, f16, f32, q8); }
    const KvCache& shape(KvType type) const { return pick(type, shape_f16, shape_f32, shape_q8); }
    const BlockFileIdentity& file_id(KvType type) const { return pick(type, id_f16, id_f32, id_q8); }
    const CheckpointFileIdentity& checkpoint_id(KvType type) const { return pick(type, cid_f16, cid_f32, cid_q8); }
    bool recurrent() const { return recurrent_shape.n_layer > 0; }

    // The cached checkpoint at the largest position <= limit that `keys` (the request's matched full
    // blocks) reach: from RAM, else from disk (probing the files this process knows of, and, by name,
    // the positions other processes most likely wrote: `kv_match` and multiples of `interval`).
    FoundCheckpoint find_checkpoint(KvType type, std::span<const BlockKey> keys, std::span<const int32_t> tokens,
                                    int64_t limit, int64_t kv_match, int64_t interval);
    // Adds `state`'s checkpoints (and its recurrent state at its last evaluated token) under their keys;
    // `keys` are its full blocks' keys, `tokens` its evaluated tokens.
    void release_checkpoints(const State& state, std::span<const BlockKey> keys, std::span<const int32_t> tokens);

    // Reads keys[first], keys[first + 1], ... from disk, else from Redis (then also writing it to disk),
    // until one is missing; the blocks found.
    std::vector<std::shared_ptr<KvBlock>> load_from_tiers(KvType type, std::span<const BlockKey> keys, size_t first,
                                                          std::span<const int32_t> tokens) const;
    // `match` ends at a block boundary with room for more: reads from disk the block listed after its last
    // full block that shares the most leading tokens with the request, adds it to the index and looks up
    // again, so the match can end inside it as it would in RAM. `match` is left as it was otherwise.
    void extend_from_next_blocks(KvType type, std::span<const BlockKey> keys, std::span<const int32_t> tokens,
                                 int64_t limit, PrefixIndex::Match& match);

    const Model& model;
    const PrefixCacheOptions options;
    const ModelFingerprint fingerprint;
    const PrefixKeyDomain f16, f32;
    const KvCache shape_f16, shape_f32;
    const BlockFileIdentity id_f16, id_f32;
    const RecurrentShape recurrent_shape;  // n_layer == 0: no recurrent layers
    const CheckpointFileIdentity cid_f16, cid_f32;
    const PrefixKeyDomain q8;  // q8_0 blocks: their own keys and files
    const KvCache shape_q8;
    const BlockFileIdentity id_q8;
    const CheckpointFileIdentity cid_q8;
    std::unique_ptr<PrefixDiskTier> disk;    // null without disk_dir; thread-safe on its own
    std::unique_ptr<PrefixRedisTier> redis;  // null without redis_url; thread-safe on its own

    mutable std::mutex mutex;
    PrefixIndex index;          // guarded by mutex
    PrefixCacheStats counters;  // guarded by mutex; the byte figures are filled in by stats()
};

std::vector<std::shared_ptr<KvBlock>> PrefixCache::Impl::load_from_tiers(KvType type, std::span<const BlockKey> keys,
                                                                         size_t first,
                                                                         std::span<const int32_t> tokens) const {
    std::vector<std::shared_ptr<KvBlock>> blocks;
    for (size_t i = first; i < keys.size(); ++i) {
        const BlockFileName name{keys[i], i == 0 ? domain(type).root() : keys[i - 1],
                                 tokens.subspan(i * kv_block_tokens).first<kv_block_tokens>()};
        std::shared_ptr<KvBlock> block = disk ? disk->load(name, file_id(type), shape(type)) : nullptr;
        if (!block && redis) {
            block = redis->load(name, file_id(type), shape(type));
            if (block && disk) disk->store(name, file_id(type), *block);
        }
        if (!block) break;
        blocks.push_back(std::move(block));
    }
    return blocks;
}

void PrefixCache::Impl::extend_from_next_blocks(KvType type, std::span<const BlockKey> keys,
                                                std::span<const int32_t> tokens, int64_t limit,
                                                PrefixIndex::Match& match) {
    const auto n_full = static_cast<size_t>(match.n_tokens / kv_block_tokens);
    const auto room = static_cast<size_t>(std::min<int64_t>(limit - match.n_tokens, kv_block_tokens));
    if (match.partial_block || room == 0) return;
    const PrefixKeyDomain& d = domain(type);
    const BlockKey parent = n_full == 0 ? d.root() : keys[n_full - 1];
    const std::span<const int32_t> next = tokens.subspan(n_full * kv_block_tokens, room);
    const NextBlock* best = nullptr;
    size_t best_shared = 0;
    const std::vector<NextBlock> listed = disk->next_blocks(parent, file_id(type));
    for (const NextBlock& e : listed) {
        const auto shared =
            static_cast<size_t>(std::mismatch(next.begin(), next.end(), e.tokens.begin()).first - next.begin());
        // The list is a hint: its key must be the one its tokens make (so the index stays content-addressed).
        if (shared > best_shared && d.block(parent, e.tokens) == e.key) best = &e, best_shared = shared;
    }
    if (best == nullptr) return;
    std::shared_ptr<KvBlock> block =
        disk->load(BlockFileName{best->key, parent, best->tokens}, file_id(type), shape(type));
    if (!block) return;
    std::vector<BlockKey> chain_keys(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(n_full));
    chain_keys.push_back(best->key);
    std::vector<int32_t> chain_tokens(tokens.begin(),
                                      tokens.begin() + static_cast<std::ptrdiff_t>(n_full * kv_block_tokens));
    chain_tokens.insert(chain_tokens.end(), best->tokens.begin(), best->tokens.end());
    std::vector<std::shared_ptr<KvBlock>> chain(match.blocks.begin(),
                                                match.blocks.begin() + static_cast<std::ptrdiff_t>(n_full));
    chain.push_back(std::move(block));
    const std::lock_guard lock(mutex);
    counters.blocks_inserted += index.insert(d.root(), chain_keys, chain_tokens, std::move(chain));
    match = index.lookup(d.root(), keys, tokens, limit);
}

FoundCheckpoint PrefixCache::Impl::find_checkpoint(KvType type, std::span<const BlockKey> keys,
                                                   std::span<const int32_t> tokens, int64_t limit, int64_t kv_match,
                                                   int64_t interval) {
    const PrefixKeyDomain& d = domain(type);
    FoundCheckpoint found;
    {
        const std::lock_guard lock(mutex);
        found = index.lookup_checkpoint(d.root(), keys, tokens, limit);
    }
    if (!disk) return found;
    // Positions past the RAM one that the matched blocks reach (a checkpoint carries its partial block's KV).
    const int64_t reach = std::min<int64_t>(limit, static_cast<int64_t>(keys.size() + 1) * kv_block_tokens - 1);
    std::vector<int64_t> positions;
    std::vector<BlockKey> names;
    for (int64_t pos = reach; pos > found.pos; --pos) {
        const CheckpointPlace at = place_of(d, keys, tokens, pos);
        positions.push_back(pos);
        names.push_back(d.checkpoint(at.parent, at.partial));
    }
    const std::vector<bool> known = disk->known_checkpoints(names);
    for (size_t i = 0; i < positions.size(); ++i) {
        const int64_t pos = positions[i];
        // Unknown files (another live process wrote them after our scan) are tried by name where they are
        // likeliest: inside the block after the matched ones (where a request that left this prefix, or a
        // sequence that ended in it, put its checkpoint: disk cannot match part of a block), at the
        // match's end and at multiples of the checkpoint interval.
        const bool next_block = pos >= static_cast<int64_t>(keys.size()) * kv_block_tokens;
        if (!known[i] && !next_block && pos != kv_match && (interval <= 0 || pos % interval != 0)) continue;
        const CheckpointPlace at = place_of(d, keys, tokens, pos);
        PrefixDiskTier::Checkpoint loaded = disk->load_checkpoint(
            CheckpointFileName{names[i], at.parent, pos, at.partial}, checkpoint_id(type), shape(type));
        if (loaded.pos == 0) continue;
        const std::lock_guard lock(mutex);
        if (index.insert_checkpoint(at.parent, names[i], at.partial, loaded.state, loaded.tail, d.root()))
            ++counters.checkpoints_inserted;
        return FoundCheckpoint{pos, std::move(loaded.state), std::move(loaded.tail), found.reach};
    }
    return found;
}

void PrefixCache::Impl::release_checkpoints(const State& state, std::span<const BlockKey> keys,
                                            std::span<const int32_t> tokens) {
    const KvCache& kv = StateAccess::kv(state);
    const PrefixKeyDomain& d = domain(kv.kv_type());
    const auto n = static_cast<int64_t>(tokens.size());
    std::vector<RecurrentCheckpoint> checkpoints;
    for (const RecurrentCheckpoint& c : StateAccess::checkpoints(state)) {
        if (c.pos > 0 && c.pos <= n) checkpoints.push_back(c);  // shares the state: O(1)
    }
    // The state after the last evaluated token: where a follow-up request (a chat's next turn) starts.
    if (n > 0 && (checkpoints.empty() || checkpoints.back().pos != n))
        checkpoints.push_back(RecurrentCheckpoint{n, StateAccess::recurrent(state)});

    struct Entry {
        CheckpointPlace at;
        BlockKey key;
        std::shared_ptr<KvBlock> tail;
    };
    std::vector<Entry> entries;
    for (const RecurrentCheckpoint& c : checkpoints) {
        Entry e{place_of(d, keys, tokens, c.pos), {}, nullptr};
        e.key = d.checkpoint(e.at.parent, e.at.partial);
        // Shared with the State, which copies it before writing past the checkpoint (copy-on-write).
        if (!e.at.partial.empty()) e.tail = kv.share_block(c.pos / kv_block_tokens);
        entries.push_back(std::move(e));
    }
    {
        const std::lock_guard lock(mutex);
        for (size_t i = 0; i < entries.size(); ++i) {
            const Entry& e = entries[i];
            if (index.insert_checkpoint(e.at.parent, e.key, e.at.partial, checkpoints[i].state, e.tail, d.root()))
                ++counters.checkpoints_inserted;
        }
        counters.evictions += index.evict_to(options.ram_budget_bytes);
    }
    if (!disk) return;
    for (size_t i = 0; i < entries.size(); ++i) {
        const Entry& e = entries[i];
        disk->store_checkpoint(CheckpointFileName{e.key, e.at.parent, checkpoints[i].pos, e.at.partial},
                               checkpoint_id(kv.kv_type()), checkpoints[i].state, e.tail.get());
    }
}

PrefixCache::PrefixCache(const Model& model, PrefixCacheOptions options)
    : impl_(std::make_unique<Impl>(model, options)) {}

PrefixCache::~PrefixCache() = default;

CachedPrefix PrefixCache::acquire(std::span<const int32_t> tokens, StateOptions options) {
    // Its blocks come back to the cache whole: a State that released its sliding layers' old KV could
    // not be cached (release() refuses it), so these keep it all.
    options.trim_sliding_window = false;
    CachedPrefix result{State(impl_->model, options)};
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) return result;
    // Leave at least one token to evaluate (the State keeps no logits), and stay within the context.
    const int64_t limit = std::min(n - 1, result.state.n_ctx());
    if (combined_fingerprint(impl_->model, options.adapters.get()) != impl_->fingerprint) {
        // Computed under other adapters than this cache's: nothing here is its prefix.
        const std::lock_guard lock(impl_->mutex);
        ++impl_->counters.lookups;
        ++impl_->counters.misses;
        impl_->counters.tokens_computed += static_cast<uint64_t>(n);
        result.tokens_to_evaluate = n;
        return result;
    }
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
    if (look_on_disk || (impl_->redis && ram_full < keys.size()))
        from_disk = impl_->load_from_tiers(options.kv_type, keys, ram_full, tokens);
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
    }
    // Disk finds whole blocks by key; where the request leaves them, its list of next blocks lets the
    // match end inside one (a recurrent model then asks for a checkpoint exactly there).
    if (impl_->disk) impl_->extend_from_next_blocks(options.kv_type, keys, tokens, limit, match);

    bool requested = false;
    if (impl_->recurrent()) {
        // The KV and tokens match up to match.n_tokens, but a recurrent state exists only at cached
        // checkpoints: reuse up to the last one reachable, and have the evaluation take one where the match
        // ends, so that release() caches it and the next request with this prefix reuses all of it.
        const size_t n_full = match.blocks.size() - (match.partial_block ? 1 : 0);
        FoundCheckpoint found = impl_->find_checkpoint(options.kv_type, std::span(keys).first(n_full), tokens, limit,
                                                       match.n_tokens, options.checkpoint_interval);
        match.blocks.resize(static_cast<size_t>(found.pos / kv_block_tokens));  // full blocks before it
        if (found.pos % kv_block_tokens != 0) match.blocks.push_back(std::move(found.tail));
        match.partial_block = found.pos % kv_block_tokens != 0;
        const int64_t matched = std::max(match.n_tokens, found.reach);
        if (matched > found.pos) {
            StateAccess::want_checkpoint(result.state, matched);
            requested = true;
        }
        match.n_tokens = found.pos;
        if (found.pos > 0) {
            StateAccess::adopt(result.state, tokens.first(static_cast<size_t>(found.pos)), std::move(match.blocks),
                               std::move(found.state));
        }
    } else {
        StateAccess::adopt(result.state, tokens.first(static_cast<size_t>(match.n_tokens)), std::move(match.blocks));
    }
    {
        const std::lock_guard lock(impl_->mutex);
        PrefixCacheStats& c = impl_->counters;
        ++c.lookups;
        ++(match.n_tokens > 0 ? c.hits : c.misses);
        if (match.partial_block) ++c.partial_block_hits;
        if (requested) ++c.checkpoints_requested;
        c.tokens_reused += static_cast<uint64_t>(match.n_tokens);
        c.tokens_computed += static_cast<uint64_t>(n - match.n_tokens);
        // States that finished since the last call may have unpinned blocks and checkpoints; the ones
        // reused are pinned by the State.
        c.evictions += impl_->index.evict_to(impl_->options.ram_budget_bytes);
    }
    result.reused_tokens = match.n_tokens;
    result.tokens_to_evaluate = n - match.n_tokens;
    result.partial_block = match.partial_block;
    return result;
}

void PrefixCache::release(const State& state) {
    const Model* model = StateAccess::model(state);
    const KvCache& kv = StateAccess::kv(state);
    // The same model (the same file loaded twice is the same model) under the same adapters.
    const bool same_model = model != nullptr && state_fingerprint(*model, state) == impl_->fingerprint;
    // Cached blocks are whole and exact: no State with trimmed sliding-layer KV (StateOptions::
    // trim_sliding_window), and none waiting to evaluate again what such a trim lost.
    const bool whole = kv.n_trimmed_blocks() == 0 && (impl_->recurrent() || state.n_pending() == 0);
    if (!same_model || !StateAccess::kv_exact(state) || !whole) {
        const std::lock_guard lock(impl_->mutex);
        ++impl_->counters.releases_rejected;
        return;
    }
    // Only a recurrent model's State has tokens waiting to be evaluated again (after a truncate()): what
    // is cached is its evaluated part.
    if (kv.n_tokens() != state.n_tokens() && !impl_->recurrent())
        throw Error(ErrorCode::internal, "PrefixCache::release: a State whose KV and tokens disagree");
    const std::span<const int32_t> tokens = state.tokens().first(static_cast<size_t>(kv.n_tokens()));
    const int64_t n_full = kv.n_tokens() / kv_block_tokens;
    const PrefixKeyDomain& domain = impl_->domain(kv.kv_type());
    const std::vector<BlockKey> keys = domain.chain(tokens, n_full);
    std::vector<std::shared_ptr<KvBlock>> blocks;
    blocks.reserve(static_cast<size_t>(n_full));
    for (int64_t b = 0; b < n_full; ++b) blocks.push_back(kv.share_block(b));

    {
        const std::lock_guard lock(impl_->mutex);
        impl_->counters.blocks_inserted += impl_->index.insert(domain.root(), keys, tokens, blocks);
        if (!impl_->recurrent()) impl_->counters.evictions += impl_->index.evict_to(impl_->options.ram_budget_bytes);
    }
    if (impl_->recurrent()) impl_->release_checkpoints(state, keys, tokens);
    // Write-through (see the header): `blocks` keeps each block alive and unchanged (shared, so
    // copy-on-write) while it is written, even if the index evicted it just now. Redis: write-behind, the
    // queue shares the blocks the same way.
    const KvType type = kv.kv_type();
    for (size_t b = 0; b < blocks.size(); ++b) {
        const BlockFileName name{keys[b], b == 0 ? domain.root() : keys[b - 1],
                                 tokens.subspan(b * kv_block_tokens).first<kv_block_tokens>()};
        if (impl_->disk) impl_->disk->store(name, impl_->file_id(type), *blocks[b]);
        if (impl_->redis) impl_->redis->store(name, impl_->file_id(type), blocks[b]);
    }
}

uint64_t PrefixCache::evict_disk_bytes(uint64_t bytes) {
    return impl_->disk ? impl_->disk->evict_least_recent(bytes) : 0;
}

PrefixCacheStats PrefixCache::stats() const {
    const std::lock_guard lock(impl_->mutex);
    PrefixCacheStats stats = impl_->counters;
    stats.blocks_held = impl_->index.blocks();
    stats.bytes_held = impl_->index.bytes();
    stats.bytes_in_use = impl_->index.bytes_in_use();
    stats.checkpoints_held = impl_->index.checkpoints();
    stats.checkpoint_bytes_held = impl_->index.checkpoint_bytes();
    stats.ram_budget_bytes = impl_->options.ram_budget_bytes;
    if (impl_->disk) impl_->disk->fill(stats);
    if (impl_->redis) impl_->redis->fill(stats);
    return stats;
}

}  // namespace kvstash
