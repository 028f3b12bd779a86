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

bool PrefixIndex::has_children(const BlockKey& key) const {
    return children_.contains(key) || checkpoint_children_.contains(key);
}

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
            // A model without attention layers has empty blocks: count their tokens, so that the budget
            // still bounds how many the index keeps.
            if (e.bytes == 0) e.bytes = sizeof e.tokens;
            lru_.push_front(LruItem{keys[i], false});
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

PrefixIndex::LruList::iterator PrefixIndex::erase_leaf(LruList::iterator it) {
    const BlockKey key = it->key;
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
            if (it->checkpoint) {
                const CheckpointEntry& c = checkpoints_.at(it->key);
                if (c.state.use_count() != 1 || (c.tail && c.tail.use_count() != 1)) continue;
                it = erase_checkpoint(it);
                ++evicted;
                progress = true;
                continue;
            }
            const Entry& e = entries_.at(it->key);
            if (e.block.use_count() != 1 || has_children(it->key)) continue;
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
    // The block `key` and its ancestors up to the first one already counted.
    const auto pin = [&](const BlockKey& key) {
        for (auto at = entries_.find(key); at != entries_.end() && pinned.insert(at->first).second;
             at = entries_.find(at->second.parent)) {
            bytes += at->second.bytes;
        }
    };
    for (const auto& [key, entry] : entries_) {
        if (entry.block.use_count() != 1) pin(key);
    }
    for (const auto& [key, c] : checkpoints_) {
        if (c.state.use_count() == 1 && (!c.tail || c.tail.use_count() == 1)) continue;
        bytes += c.bytes;
        pin(c.parent);
    }
    return bytes;
}

PrefixIndex::CheckpointMatch PrefixIndex::lookup_checkpoint(const BlockKey& root, std::span<const BlockKey> keys,
                                                            std::span<const int32_t> tokens, int64_t limit) {
    CheckpointMatch match;
    // How far the tokens of the checkpoints after the last matched block run along the request's (their
    // tail blocks hold the KV of those positions).
    if (const auto last = checkpoint_children_.find(keys.empty() ? root : keys.back());
        last != checkpoint_children_.end()) {
        const int64_t start = static_cast<int64_t>(keys.size()) * kv_block_tokens;
        const auto room = static_cast<size_t>(std::max<int64_t>(limit - start, 0));
        for (const BlockKey& child : last->second) {
            const std::vector<int32_t>& partial = checkpoints_.at(child).partial;
            const size_t n = std::min(room, partial.size());
            const auto shared =
                std::mismatch(partial.begin(), partial.begin() + static_cast<std::ptrdiff_t>(n), tokens.begin() + start)
                    .first -
                partial.begin();
            match.reach = std::max(match.reach, start + static_cast<int64_t>(shared));
        }
    }
    // Checkpoints after more full blocks lie further: the first boundary (from the last) with a match wins.
    for (size_t b = keys.size() + 1; b-- > 0;) {
        const auto children = checkpoint_children_.find(b == 0 ? root : keys[b - 1]);
        if (children == checkpoint_children_.end()) continue;
        const int64_t start = static_cast<int64_t>(b) * kv_block_tokens;
        CheckpointEntry* best = nullptr;
        for (const BlockKey& child : children->second) {
            CheckpointEntry& c = checkpoints_.at(child);
            const int64_t pos = start + static_cast<int64_t>(c.partial.size());
            if (pos > limit || (best != nullptr && c.partial.size() <= best->partial.size())) continue;
            if (std::equal(c.partial.begin(), c.partial.end(), tokens.begin() + start)) best = &c;
        }
        if (best == nullptr) continue;
        lru_.splice(lru_.begin(), lru_, best->lru);
        match.pos = start + static_cast<int64_t>(best->partial.size());
        match.state = best->state;
        match.tail = best->tail;
        break;
    }
    return match;
}

bool PrefixIndex::insert_checkpoint(const BlockKey& parent, const BlockKey& key, std::span<const int32_t> partial,
                                    RecurrentState state, std::shared_ptr<KvBlock> tail, const BlockKey& root) {
    if (partial.size() >= static_cast<size_t>(kv_block_tokens) || state.empty() || (!partial.empty() && !tail)) {
        throw Error(ErrorCode::internal, "PrefixIndex::insert_checkpoint: not a checkpoint");
    }
    if (parent != root && !entries_.contains(parent)) return false;
    if (const auto it = checkpoints_.find(key); it != checkpoints_.end()) {
        // Same key, so bitwise the same state (unless the 128-bit hash collided: then keep what is there).
        if (it->second.parent == parent &&
            std::equal(partial.begin(), partial.end(), it->second.partial.begin(), it->second.partial.end())) {
            lru_.splice(lru_.begin(), lru_, it->second.lru);
        }
        return false;
    }
    CheckpointEntry c;
    c.parent = parent;
    c.partial.assign(partial.begin(), partial.end());
    c.bytes = state.bytes() + (tail ? tail->k.size() + tail->v.size() : 0);
    c.state = std::move(state);
    c.tail = std::move(tail);
    lru_.push_front(LruItem{key, true});
    c.lru = lru_.begin();
    bytes_ += c.bytes;
    checkpoint_bytes_ += c.bytes;
    checkpoints_.emplace(key, std::move(c));
    checkpoint_children_[parent].push_back(key);
    return true;
}

PrefixIndex::LruList::iterator PrefixIndex::erase_checkpoint(LruList::iterator it) {
    const auto entry = checkpoints_.find(it->key);
    const auto siblings = checkpoint_children_.find(entry->second.parent);
    if (siblings == checkpoint_children_.end())
        throw Error(ErrorCode::internal, "PrefixIndex: a checkpoint missing from its parent's children");
    std::vector<BlockKey>& list = siblings->second;
    *std::find(list.begin(), list.end(), it->key) = list.back();
    list.pop_back();
    if (list.empty()) checkpoint_children_.erase(siblings);
    bytes_ -= entry->second.bytes;
    checkpoint_bytes_ -= entry->second.bytes;
    checkpoints_.erase(entry);
    return lru_.erase(it);
}

}  // namespace kvstash
