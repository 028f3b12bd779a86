// The prefix cache's index: cached KV blocks by content key, as a forest (a block's parent is the block
// before it in its sequence; the roots are one per PrefixKeyDomain), with least-recently-used eviction.
//
// Not thread-safe: PrefixCache holds a mutex around every call. A block whose shared_ptr use_count() is
// 1 is referenced by the index only; any other reference is a live State (or a caller about to hand it
// to one), and such a block is never evicted. Eviction takes leaves only, so every cached block stays
// reachable from its root.
//
// Recurrent checkpoints (models with Mamba layers) are leaves of the same forest: a checkpoint at
// P = 32·b + k hangs off block b-1 (or the root) under its checkpoint key, holds the recurrent state
// after P tokens and, when k > 0, the block whose first k positions are the KV of [32·b, P) (so that it
// does not depend on a full block b being cached). They share the blocks' LRU order and byte count; a
// block with checkpoints is not a leaf. As for blocks, a checkpoint whose recurrent state or tail block a
// live State shares (its own checkpoint, or one it adopted and has not written to yet) is not evicted.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/prefix_cache_key.h"
#include "kv/kv_cache.h"
#include "kv/recurrent_state.h"

namespace kvstash {

class PrefixIndex {
public:
    struct Match {
        std::vector<std::shared_ptr<KvBlock>> blocks;  // the matched full blocks, then the partial one if any
        int64_t n_tokens = 0;                          // positions of `blocks` that the request shares
        bool partial_block = false;                    // the last block is shared for its first tokens only
    };

    // The longest cached prefix of `tokens`, at most `limit` tokens. keys[i] is the key of tokens' full
    // block i under `root`'s domain (keys.size() == limit / kv_block_tokens). Marks the matched blocks used.
    Match lookup(const BlockKey& root, std::span<const BlockKey> keys, std::span<const int32_t> tokens, int64_t limit);

    // The cached checkpoint at the largest position <= limit along `keys` (the request's full-block keys
    // that lookup() matched): its parent is keys[b-1] (or root) for some b <= keys.size() and its partial
    // tokens are tokens[32b, P). Marks it used. pos == 0 when there is none.
    struct CheckpointMatch {
        int64_t pos = 0;
        RecurrentState state;
        std::shared_ptr<KvBlock> tail;  // the KV of [32·(pos / 32), pos) when pos % 32 > 0
        // Where the request leaves the tokens of the checkpoints cached after its last matched full block
        // (whose tail blocks hold their KV): a match of the KV/token chain beyond the full blocks.
        int64_t reach = 0;
    };
    CheckpointMatch lookup_checkpoint(const BlockKey& root, std::span<const BlockKey> keys,
                                      std::span<const int32_t> tokens, int64_t limit);

    // Adds the checkpoint `key` after `partial` (tokens[32b, P)) following `parent`, which must be the root
    // or a cached block (else nothing is added: it could never be found). One already present is marked
    // used. Returns whether it was new.
    bool insert_checkpoint(const BlockKey& parent, const BlockKey& key, std::span<const int32_t> partial,
                           RecurrentState state, std::shared_ptr<KvBlock> tail, const BlockKey& root);

    // Adds a sequence's full blocks: blocks[i] holds tokens[32i, 32i+32) and keys[i] is its key. Blocks
    // already present are marked used (and, when only the index held the old copy, replaced by the
    // caller's identical one, so that the caller's State pins what the index counts). Returns the
    // number of new entries.
    uint64_t insert(const BlockKey& root, std::span<const BlockKey> keys, std::span<const int32_t> tokens,
                    std::vector<std::shared_ptr<KvBlock>> blocks);

    // Evicts least recently used leaves that nothing else references until bytes() <= budget or none is
    // left to evict. Returns the number evicted.
    uint64_t evict_to(uint64_t budget);

    uint64_t blocks() const { return entries_.size(); }
    uint64_t checkpoints() const { return checkpoints_.size(); }
    uint64_t bytes() const { return bytes_; }  // blocks' and checkpoints'
    uint64_t checkpoint_bytes() const { return checkpoint_bytes_; }
    // Bytes that evict_to() cannot free now: referenced blocks and checkpoints, and their ancestors.
    uint64_t bytes_in_use() const;

private:
    struct LruItem {
        BlockKey key;
        bool checkpoint = false;
    };
    using LruList = std::list<LruItem>;

    struct Entry {
        std::shared_ptr<KvBlock> block;
        BlockKey parent;                                // a root or another entry
        std::array<int32_t, kv_block_tokens> tokens{};  // checked on every match: a key collision never shares
        uint64_t bytes = 0;                             // K + V (at least the tokens' 128 bytes: see insert)
        LruList::iterator lru;
    };
    struct CheckpointEntry {
        BlockKey parent;
        std::vector<int32_t> partial;  // tokens[32b, P): checked on every match, like a block's tokens
        RecurrentState state;
        std::shared_ptr<KvBlock> tail;
        uint64_t bytes = 0;  // recurrent state + tail block
        LruList::iterator lru;
    };

    bool same_tokens(const Entry& e, std::span<const int32_t> tokens) const;
    void touch(Entry& e);
    bool has_children(const BlockKey& key) const;
    LruList::iterator erase_leaf(LruList::iterator it);
    LruList::iterator erase_checkpoint(LruList::iterator it);

    std::unordered_map<BlockKey, Entry, BlockKeyHash> entries_;
    std::unordered_map<BlockKey, std::vector<BlockKey>, BlockKeyHash>
        children_;  // parent -> children (non-empty lists only)
    std::unordered_map<BlockKey, CheckpointEntry, BlockKeyHash> checkpoints_;
    std::unordered_map<BlockKey, std::vector<BlockKey>, BlockKeyHash>
        checkpoint_children_;  // parent -> checkpoints (non-empty lists only)
    LruList lru_;              // most recently used first; an entry is always touched after its parent
    uint64_t bytes_ = 0;
    uint64_t checkpoint_bytes_ = 0;
};

}  // namespace kvstash
