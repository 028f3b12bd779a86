// A tier of the prefix cache below RAM (include/kvstash/prefix_cache.h): blocks stored and found by their
// content key (prefix_cache_key.h) and verified on every read, so that a tier can be lost, flushed,
// corrupted or shared by strangers without ever changing an answer: a bad or missing block is a miss.
//
// PrefixCache keeps its tiers in order, nearest first (disk, then Redis). acquire() continues the run of
// blocks found in RAM from the tiers, asking each in order for each block; a block found in a later tier
// is offered to the earlier ones. release() offers every full block to every tier. Next-block lists and
// recurrent checkpoints are optional: a tier without them keeps the defaults (nothing listed or kept).
// A third tier is one class implementing this (and a line in prefix_cache.cpp's make_tiers).
//
// Implementations are thread-safe, and never throw on I/O: a failed read is a miss, a failed write is
// counted in their stats.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/prefix_cache_disk_checkpoint.h"
#include "engine/prefix_cache_disk_file.h"
#include "engine/prefix_cache_disk_next.h"
#include "kv/kv_cache.h"
#include "kv/recurrent_state.h"
#include "kvstash/prefix_cache.h"

namespace kvstash {

class PrefixTier {
public:
    virtual ~PrefixTier() = default;

    // The block, verified against `block` and `id`, in a new KvBlock allocated by a fork of `shape` (an
    // empty KvCache of the block's type and dimensions); nullptr on a miss or a refused copy.
    virtual std::shared_ptr<KvBlock> load(const BlockFileName& block, const BlockFileIdentity& id,
                                          const KvCache& shape) = 0;
    // Offers the block; `kv` is shared, so unchanged while the tier holds it (copy-on-write).
    virtual void store(const BlockFileName& block, const BlockFileIdentity& id, std::shared_ptr<const KvBlock> kv) = 0;
    // An acquire() whose run of blocks no tier could continue (for tiers that count misses per lookup).
    virtual void note_lookup_miss() {}
    // Adds the tier's counters and byte figures to `stats`.
    virtual void fill(PrefixCacheStats& stats) const = 0;

    // The blocks listed as following `parent` (hints: load() verifies each); none by default.
    virtual std::vector<NextBlock> next_blocks(const BlockKey& /*parent*/, const BlockFileIdentity& /*id*/) {
        return {};
    }

    // Recurrent checkpoints (models with Mamba layers); none kept by default.
    struct Checkpoint {
        int64_t pos = 0;  // 0: a miss
        RecurrentState state;
        std::shared_ptr<KvBlock> tail;  // the partial block's KV, when the partial is not empty
    };
    virtual bool keeps_checkpoints() const { return false; }
    // Which of `keys` name checkpoints the tier knows it holds (others may be found by name all the same).
    virtual std::vector<bool> known_checkpoints(std::span<const BlockKey> keys) const {
        return std::vector<bool>(keys.size(), false);
    }
    // The checkpoint (its tail block allocated by a fork of `shape`); pos == 0 on a miss.
    virtual Checkpoint load_checkpoint(const CheckpointFileName& /*name*/, const CheckpointFileIdentity& /*id*/,
                                       const KvCache& /*shape*/) {
        return {};
    }
    // `tail` is required when the partial is not empty.
    virtual void store_checkpoint(const CheckpointFileName& /*name*/, const CheckpointFileIdentity& /*id*/,
                                  const RecurrentState& /*state*/, const KvBlock* /*tail*/) {}

    // Frees up to `bytes` of local storage (a disk tier's files, least recently used first), whatever the
    // budget, for another writer on the same filesystem; the bytes freed (0: nothing local to free).
    virtual uint64_t evict_least_recent(uint64_t /*bytes*/) { return 0; }
};

}  // namespace kvstash
