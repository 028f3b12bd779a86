// The prefix cache's index: cached KV blocks by content key, as a forest (a block's parent is the block
// before it in its sequence; the roots are one per PrefixKeyDomain), with least-recently-used eviction.
//
// Not thread-safe: PrefixCache holds a mutex around every call. A block whose shared_ptr use_count() is
// 1 is referenced by the index only; any other reference is a live State (or a caller about to hand it
// to one), and such a block is never evicted. Eviction takes leaves only, so every cached block stays
// reachable from its root.
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
    uint64_t bytes() const { return bytes_; }
    // Bytes that evict_to() cannot free now: referenced blocks and their ancestors.
    uint64_t bytes_in_use() const;

private:
    struct Entry {
        std::shared_ptr<KvBlock> block;
        BlockKey parent;                                // a root or another entry
        std::array<int32_t, kv_block_tokens> tokens{};  // checked on every match: a key collision never shares
        uint64_t bytes = 0;                             // K + V
        std::list<BlockKey>::iterator lru;
    };

    bool same_tokens(const Entry& e, std::span<const int32_t> tokens) const;
    void touch(Entry& e);
    bool has_children(const BlockKey& key) const;
    std::list<BlockKey>::iterator erase_leaf(std::list<BlockKey>::iterator it);

    std::unordered_map<BlockKey, Entry, BlockKeyHash> entries_;
    std::unordered_map<BlockKey, std::vector<BlockKey>, BlockKeyHash>
        children_;             // parent -> children (non-empty lists only)
    std::list<BlockKey> lru_;  // most recently used first; a block is always touched after its parent
    uint64_t bytes_ = 0;
};

}  // namespace kvstash
