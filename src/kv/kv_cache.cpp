#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "kvstash/error.h"

namespace kvstash {

KvCache::KvCache(int64_t n_layer, int64_t n_embd_kv, KvType type, KvBlockAllocator& allocator)
    : allocator_(&allocator), n_layer_(n_layer), n_embd_kv_(n_embd_kv) {
    type_ = tensor_type_of(type);
    row_bytes_ = tensor_row_bytes(type_, n_embd_kv);
    n_global_ = n_layer;
    global_index_.resize(static_cast<size_t>(n_layer));
    for (int64_t l = 0; l < n_layer; ++l) global_index_[static_cast<size_t>(l)] = l;
}

void KvCache::set_sliding_layers(const std::vector<uint8_t>& sliding) {
    if (static_cast<int64_t>(sliding.size()) != n_layer_ || !blocks_.empty())
        throw Error(ErrorCode::internal, "KvCache::set_sliding_layers: wrong layer count or a cache in use");
    n_global_ = 0;
    for (int64_t l = 0; l < n_layer_; ++l)
        global_index_[static_cast<size_t>(l)] = sliding[static_cast<size_t>(l)] ? -1 : n_global_++;
}

uint64_t KvCache::trimmed_block_bytes() const {
    return 2 * static_cast<uint64_t>(n_global_) * kv_block_tokens * row_bytes_;
}

uint64_t KvCache::bytes() const {
    return static_cast<uint64_t>(n_trimmed_) * trimmed_block_bytes() +
           static_cast<uint64_t>(n_blocks() - n_trimmed_) * block_bytes();
}

void KvCache::trim_sliding(int64_t keep_from) {
    if (!has_sliding_layers()) return;
    const int64_t until = std::min<int64_t>(keep_from, n_tokens_) / kv_block_tokens;  // blocks [0, until)
    const size_t layer_bytes = static_cast<size_t>(kv_block_tokens * row_bytes_);
    for (int64_t b = n_trimmed_; b < until; ++b) {
        const KvBlock& whole = *blocks_[static_cast<size_t>(b)];
        std::shared_ptr<KvBlock> small = new_block(static_cast<size_t>(n_global_) * layer_bytes);
        for (int64_t l = 0; l < n_layer_; ++l) {
            const int64_t g = global_index_[static_cast<size_t>(l)];
            if (g < 0) continue;
            const size_t from = static_cast<size_t>(l) * layer_bytes, to = static_cast<size_t>(g) * layer_bytes;
            allocator_->copy(small->k.data() + to, whole.k.data() + from, layer_bytes);
            allocator_->copy(small->v.data() + to, whole.v.data() + from, layer_bytes);
        }
        blocks_[static_cast<size_t>(b)] = std::move(small);  // the whole block goes unless a fork holds it
    }
    n_trimmed_ = std::max(n_trimmed_, until);
}

void KvCache::grow_trimmed(int64_t n) {
    if (n_trimmed_ != n_blocks() || n % kv_block_tokens != 0 || n < n_tokens_)
        throw Error(ErrorCode::internal, "KvCache::grow_trimmed: only whole trimmed blocks after trimmed ones");
    const size_t half = static_cast<size_t>(n_global_) * kv_block_tokens * row_bytes_;
    while (n_blocks() < n / kv_block_tokens) {
        blocks_.push_back(new_block(half));
    }
    n_trimmed_ = n_blocks();
    n_tokens_ = n;
}

uint64_t KvCache::block_bytes() const { return 2 * static_cast<uint64_t>(n_layer_) * kv_block_tokens * row_bytes_; }

void KvCache::make_unique(size_t i) {
    if (blocks_[i].use_count() > 1) blocks_[i] = std::make_shared<KvBlock>(*blocks_[i]);
}

void KvCache::grow(int64_t n) {
    if (n < n_tokens_) throw Error(ErrorCode::internal, "KvCache::grow cannot shrink; use truncate");
    // Writing into a trimmed block would write sliding-layer rows that it has no room for.
    if (n > n_tokens_ && n_tokens_ < trimmed_until())
        throw Error(ErrorCode::internal, "KvCache::grow: positions of a trimmed block cannot be written");
    const size_t needed = static_cast<size_t>((n + kv_block_tokens - 1) / kv_block_tokens);
    // The block holding position n_tokens_ (if partly filled) is about to be written: un-share it.
    if (n > n_tokens_ && n_tokens_ % kv_block_tokens != 0)
        make_unique(static_cast<size_t>(n_tokens_ / kv_block_tokens));
    const size_t half = static_cast<size_t>(n_layer_) * kv_block_tokens * row_bytes_;
    while (blocks_.size() < needed) {
        blocks_.push_back(new_block(half));
    }
    n_tokens_ = n;
}

void KvCache::truncate(int64_t n) {
    if (n < 0 || n > n_tokens_)
        throw Error(ErrorCode::out_of_range, "cannot truncate the KV cache to " + std::to_string(n) +
                                                 " tokens: it holds " + std::to_string(n_tokens_));
    blocks_.resize(static_cast<size_t>((n + kv_block_tokens - 1) / kv_block_tokens));
    n_trimmed_ = std::min(n_trimmed_, n_blocks());
    n_tokens_ = n;
}

void KvCache::assign_blocks(std::vector<std::shared_ptr<KvBlock>> blocks, int64_t n) {
    const size_t half = static_cast<size_t>(n_layer_) * kv_block_tokens * row_bytes_;
    if (n < 0 || blocks.size() != static_cast<size_t>((n + kv_block_tokens - 1) / kv_block_tokens)) {
        throw Error(ErrorCode::internal, "KvCache::assign_blocks: " + std::to_string(blocks.size()) +
                                             " blocks cannot hold exactly " + std::to_string(n) + " positions");
    }
    for (const auto& block : blocks) {
        if (!block || block->k.size() != half || block->v.size() != half || &block->k.allocator() != allocator_) {
            throw Error(ErrorCode::internal,
                        "KvCache::assign_blocks: a block of another size or memory than this cache's");
        }
    }
    blocks_ = std::move(blocks);
    n_tokens_ = n;
    n_trimmed_ = 0;
    k_table_.clear();
    v_table_.clear();
}

KvCache KvCache::fork() const {
    KvCache copy = *this;  // copies the shared_ptrs, not the blocks
    copy.k_table_.clear();
    copy.v_table_.clear();
    return copy;
}

uint8_t* KvCache::k_row(int64_t layer, int64_t pos) {
    KvBlock& b = *blocks_[static_cast<size_t>(pos / kv_block_tokens)];
    return b.k.data() +
           (static_cast<uint64_t>(layer) * kv_block_tokens + static_cast<uint64_t>(pos % kv_block_tokens)) * row_bytes_;
}

uint8_t* KvCache::v_row(int64_t layer, int64_t pos) {
    KvBlock& b = *blocks_[static_cast<size_t>(pos / kv_block_tokens)];
    return b.v.data() +
           (static_cast<uint64_t>(layer) * kv_block_tokens + static_cast<uint64_t>(pos % kv_block_tokens)) * row_bytes_;
}

KvBlock& KvCache::writable_block(int64_t i) {
    make_unique(static_cast<size_t>(i));
    return *blocks_[static_cast<size_t>(i)];
}

std::shared_ptr<KvBlock> KvCache::new_block(size_t half_bytes) const {
    return std::make_shared<KvBlock>(
        KvBlock{KvBlockBuffer(half_bytes, *allocator_), KvBlockBuffer(half_bytes, *allocator_)});
}

KvLayerView KvCache::layer_view(int64_t layer) {
    k_table_.resize(blocks_.size());
    v_table_.resize(blocks_.size());
    const uint64_t layer_offset = static_cast<uint64_t>(layer) * kv_block_tokens * row_bytes_;
    const int64_t global = global_index_[static_cast<size_t>(layer)];
    const uint64_t trimmed_offset = static_cast<uint64_t>(global) * kv_block_tokens * row_bytes_;
    for (size_t i = 0; i < blocks_.size(); ++i) {
        const bool trimmed = static_cast<int64_t>(i) < n_trimmed_;
        if (trimmed && global < 0) {
            k_table_[i] = nullptr;  // outside every window (see the header)
            v_table_[i] = nullptr;
            continue;
        }
        const uint64_t offset = trimmed ? trimmed_offset : layer_offset;
        k_table_[i] = blocks_[i]->k.data() + offset;
        v_table_[i] = blocks_[i]->v.data() + offset;
    }
    KvLayerView view;
    view.type = type_;
    view.block_tokens = kv_block_tokens;
    view.row_bytes = row_bytes_;
    view.k_blocks = k_table_.data();
    view.v_blocks = v_table_.data();
    return view;
}

}  // namespace kvstash
