// The block index of the prefix cache: lookup (full blocks, then a partial match), insert, LRU eviction.
#include "engine/prefix_cache_index.h"

#include <algorithm>
#include <unordered_set>

#include "kvstash/error.h"

namespace kvstash {

bool PrefixIndex::same_tokens(const Entry& e, std::span<const int32_t> tokens) const {
    return tokens.size() >= kv_block_tokens && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin());
}

void PrefixIndex::touch(Entry& e) { lru_.splice(lru_.begin(), lru_, e.lru); }

bool PrefixIndex::has_children(const BlockKey& key) const { return children_.contains(key); }

PrefixIndex::Match PrefixIndex::lookup(const BlockKey& root, std::span<const BlockKey> keys,
                                       std::span<const int32_t> tokens, int64_t limit) {
    if (limit < 0 || static_cast<uint64_t>(limit) > tokens.size() ||
        keys.size() != static_cast<size_t>(limit / kv_block_tokens)) {
        throw Error(ErrorCode::internal, "PrefixIndex::lookup: keys and limit do not fit the tokens");
    }
    Match match;
    BlockKey parent = root;
    size_t full = 0;
    for (; full < keys.size(); ++full) {
        const auto it = entries_.find(keys[full]);
        if (it == entries_.end() || it->second.parent != parent ||
            !same_tokens(it->second, tokens.subspan(full * kv_block_tokens)))
            break;
        touch(it->second);
        match.blocks.push_back(it->second.block);
        parent = keys[full];
    }
    match.n_tokens = static_cast<int64_t>(full) * kv_block_tokens;

    // The next block: the child of `parent` sharing the most leading tokens with the request.
    const auto room = static_cast<size_t>(std::min<int64_t>(limit - match.n_tokens, kv_block_tokens));
    const auto children = children_.find(parent);
    if (room == 0 || children == children_.end()) return match;
    const std::span<const int32_t> next = tokens.subspan(full * kv_block_tokens, room);
    Entry* best = nullptr;
    size_t best_shared = 0;
    for (const BlockKey& child : children->second) {
        Entry& e = entries_.at(child);
        const size_t shared =
            static_cast<size_t>(std::mismatch(next.begin(), next.end(), e.tokens.begin()).first - next.begin());
        if (shared > best_shared) best = &e, best_shared = shared;
    }
    if (best == nullptr) return match;
    touch(*best);
    match.blocks.push_back(best->block);
    match.n_tokens += static_cast<int64_t>(best_shared);
    match.partial_block = best_shared < kv_block_tokens;
    return match;
}

uint64_t PrefixIndex::insert(const BlockKey& root, std::span<const BlockKey> keys, std::span<const int32_t> tokens,
                             std::vector<std::shared_ptr<KvBlock>> blocks) {
    if (keys.size() != blocks.size() || tokens.size() < keys.size() * kv_block_tokens) {
        throw Error(ErrorCode::internal, "PrefixIndex::insert: keys, blocks and tokens disagree");
    }
    uint64_t added = 0;
    BlockKey parent = root;
    for (size_t i = 0; i < keys.size(); ++i) {
        const std::span<const int32_t> block_tokens = tokens.subspan(i * kv_block_tokens, kv_block_tokens);
        if (const auto it = entries_.find(keys[i]); it != entries_.end()) {
            Entry& e = it->second;
            if (e.parent != parent || !same_tokens(e, block_tokens)) break;  // a key collision: keep what is there
            touch(e);
            // Same key, so bitwise the same KV: keep the caller's copy when nobody else uses ours.
            if (e.block != blocks[i] && e.block.use_count() == 1) e.block = std::move(blocks[i]);
        } else {
            Entry e;
            e.block = std::move(blocks[i]);
            e.parent = parent;
            std::copy(block_tokens.begin(), block_tokens.end(), e.tokens.begin());
            e.bytes = e.block->k.size() + e.block->v.size();
            lru_.push_front(keys[i]);
            e.lru = lru_.begin();
            bytes_ += e.bytes;
            entries_.emplace(keys[i], std::move(e));
            children_[parent].push_back(keys[i]);
            ++added;
        }
        parent = keys[i];
    }
    return added;
}

std::list<BlockKey>::iterator PrefixIndex::erase_leaf(std::list<BlockKey>::iterator it) {
    const BlockKey key = *it;
    const auto entry = entries_.find(key);
    const auto siblings = children_.find(entry->second.parent);
    if (siblings == children_.end())
        throw Error(ErrorCode::internal, "PrefixIndex: a block missing from its parent's children");
    std::vector<BlockKey>& list = siblings->second;
    const auto at = std::find(list.begin(), list.end(), key);
    *at = list.back();
    list.pop_back();
    if (list.empty()) children_.erase(siblings);
    bytes_ -= entry->second.bytes;
    entries_.erase(entry);
    return lru_.erase(it);
}

uint64_t PrefixIndex::evict_to(uint64_t budget) {
    uint64_t evicted = 0;
    // Usually one pass from the least recently used end suffices (a parent is used whenever a child is,
    // so it sits nearer the front and is reached after its last child went); passes repeat otherwise.
    for (bool progress = true; bytes_ > budget && progress;) {
        progress = false;
        auto it = lru_.end();
        while (it != lru_.begin() && bytes_ > budget) {
            --it;
            const Entry& e = entries_.at(*it);
            if (e.block.use_count() != 1 || has_children(*it)) continue;
            it = erase_leaf(it);
            ++evicted;
            progress = true;
        }
    }
    return evicted;
}

uint64_t PrefixIndex::bytes_in_use() const {
    std::unordered_set<BlockKey, BlockKeyHash> pinned;
    uint64_t bytes = 0;
    for (const auto& [key, entry] : entries_) {
        if (entry.block.use_count() == 1) continue;
        // The block and its ancestors up to the first one already counted.
        for (auto at = entries_.find(key); at != entries_.end() && pinned.insert(at->first).second;
             at = entries_.find(at->second.parent)) {
            bytes += at->second.bytes;
        }
    }
    return bytes;
}

}  // namespace kvstash
