// The prefix cache's disk tier: a directory of content-addressed block files (prefix_cache_disk_file.h),
// lists of the blocks following a block (prefix_cache_disk_next.h) and recurrent checkpoint files
// (prefix_cache_disk_checkpoint.h) within one byte budget, shared by every process that points at it.
//
// Bookkeeping: which files exist, their sizes and their least-recently-used order, from a scan of the
// directory at construction (order by file mtime) and then from this process's own reads, writes and
// deletions. The file's mtime is the recency shared between processes: reads and stores set it to now.
// Other processes may add or delete files at any time: a file that vanished is a miss (and is written
// again by the next store), a file that appeared is found by name. The budget counts the files this
// process knows of; what other live processes wrote since our scan is trimmed by whoever scans next.
//
// Thread-safe: one mutex guards the bookkeeping; file I/O runs outside it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/prefix_cache_disk_checkpoint.h"
#include "engine/prefix_cache_disk_file.h"
#include "engine/prefix_cache_disk_next.h"
#include "kv/kv_cache.h"
#include "kvstash/prefix_cache.h"

namespace kvstash {

class PrefixDiskTier {
public:
    // Creates `dir` if missing (throws Error(io) when that fails or it is not a directory), scans it and
    // deletes least recently used block files down to `budget_bytes`.
    PrefixDiskTier(std::string dir, uint64_t budget_bytes);

    // The block from its file, verified against `block` and `id`, in a new KvBlock allocated by a fork of
    // `shape` (an empty KvCache of the block's type and dimensions); nullptr on a miss. A refused file is
    // deleted and counted (disk_rejected).
    std::shared_ptr<KvBlock> load(const BlockFileName& block, const BlockFileIdentity& id, const KvCache& shape);

    // Makes sure the block has a file: a known one is marked recently used (its mtime set to now), an
    // unknown or vanished one is written, and added to its parent's list of next blocks. Write failures
    // are counted (disk_write_errors), never thrown: the cache stays correct without its disk tier. Then
    // trims the directory to the budget.
    void store(const BlockFileName& block, const BlockFileIdentity& id, const KvBlock& kv);

    // The blocks listed as following `parent` (most recently added first; hints: load() verifies each);
    // empty on a miss. A refused list is deleted and counted (disk_rejected).
    std::vector<NextBlock> next_blocks(const BlockKey& parent, const BlockFileIdentity& id);

    // A recurrent checkpoint from its file (its tail block, when the partial is not empty, allocated by a
    // fork of `shape`); pos == 0 on a miss. Refused files are deleted and counted as for blocks.
    struct Checkpoint {
        int64_t pos = 0;
        RecurrentState state;
        std::shared_ptr<KvBlock> tail;
    };
    Checkpoint load_checkpoint(const CheckpointFileName& name, const CheckpointFileIdentity& id, const KvCache& shape);
    // As store() for a checkpoint; `tail` is required when the partial is not empty.
    void store_checkpoint(const CheckpointFileName& name, const CheckpointFileIdentity& id, const RecurrentState& state,
                          const KvBlock* tail);
    // Which of `keys` name checkpoint files this process knows of (from its scan and its own I/O).
    std::vector<bool> known_checkpoints(std::span<const BlockKey> keys) const;

    // Deletes least recently used files until `bytes` are freed or none is left (counted as evictions),
    // whatever the budget: room for another writer on the same filesystem (a named state that found the
    // disk full). Returns the bytes freed.
    uint64_t evict_least_recent(uint64_t bytes);

    // Adds the disk_* counters and byte figures to `stats`.
    void fill(PrefixCacheStats& stats) const;

    const std::string& dir() const { return dir_; }

private:
    enum class Kind : uint8_t { block, checkpoint, next };  // .kvb, .rck, .kvn (keys never coincide)

    std::string path_of(const BlockKey& key, Kind kind) const;
    // Bookkeeping after a read / a store attempt of a file of `bytes` (store: written or adopted).
    void after_read(const BlockKey& key, Kind kind, BlockFileRead result, uint64_t bytes);
    bool mark_if_known(const BlockKey& key, Kind kind, uint64_t bytes);
    void after_store(const BlockKey& key, Kind kind, bool ok, bool written, uint64_t bytes);
    // Adds `block` (just written) to the list of blocks following its parent.
    void add_next_block(const BlockFileName& block, const BlockFileIdentity& id);
    void scan();
    // Bookkeeping, with mutex_ held.
    void note_present(const BlockKey& key, Kind kind, uint64_t bytes);
    void forget(const BlockKey& key);
    // The least recently used files beyond the budget, forgotten.
    std::vector<std::pair<BlockKey, Kind>> take_victims();
    void delete_files(const std::vector<std::pair<BlockKey, Kind>>& victims);

    struct File {
        uint64_t bytes = 0;
        Kind kind = Kind::block;
        std::list<BlockKey>::iterator lru;
    };

    const std::string dir_;
    const uint64_t budget_;
    mutable std::mutex mutex_;
    std::unordered_map<BlockKey, File, BlockKeyHash> files_;  // guarded by mutex_
    std::list<BlockKey> lru_;                                 // most recently used first
    uint64_t bytes_ = 0;    // of every file, next-block lists included (the budget covers them too)
    uint64_t n_lists_ = 0;  // next-block lists among files_
    uint64_t checkpoint_hits_ = 0, checkpoints_written_ = 0;
    uint64_t hits_ = 0, written_ = 0, bytes_written_ = 0, bytes_read_ = 0, rejected_ = 0, evictions_ = 0,
             write_errors_ = 0;
};

}  // namespace kvstash
