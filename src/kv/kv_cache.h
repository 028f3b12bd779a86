// The KV cache of one sequence, stored in fixed-size blocks of kv_block_tokens positions.
// Blocks are shared by reference count between forks and copied on the first write (copy-on-write),
// so fork() costs O(number of blocks) pointer copies, independent of the bytes stored.
//
// Block layout: K and V each [n_layer][kv_block_tokens][row_bytes]: a row is n_embd_kv elements of the KV
// type (f16, f32, or q8_0: n_embd_kv / 32 ggml block_q8_0 of 34 bytes, quantized once when the row is
// written, from that row alone: model/forward.cpp).
//
// Sliding-window layers (Gemma 3; set_sliding_layers): a block all of whose positions lie before every
// position the sliding layers will read again can be trimmed (trim_sliding): it is replaced by a smaller
// one that holds only the global layers, K and V each [n_global][kv_block_tokens][n_embd_kv] in layer
// order. Trimmed blocks are always the first n_trimmed_blocks(); their sliding-layer rows are gone, so a
// query may only attend to them through a global layer (the window guarantees it: see
// State / docs/architecture/kv-cache.md, "Sliding-window KV").
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/attention/attention.h"
#include "format/tensor_type.h"
#include "kv/kv_block_buffer.h"
#include "kv/kv_tensor_type.h"
#include "kvstash/kv_type.h"

namespace kvstash {

constexpr int64_t kv_block_tokens = 32;

// Which half of a block (or of a row's K/V) an operation means.
enum class KvHalf { keys, values };

// One block: K and V halves, each [n_layer][kv_block_tokens][row_bytes], uninitialised until written
// (see kv_block_buffer.h: pooled, recycled memory, never zero-filled).
struct KvBlock {
    KvBlockBuffer k;
    KvBlockBuffer v;
    const KvBlockBuffer& half(KvHalf h) const { return h == KvHalf::keys ? k : v; }
    KvBlockBuffer& half(KvHalf h) { return h == KvHalf::keys ? k : v; }
};

class KvCache {
public:
    KvCache() = default;
    // type: f16, f32 or q8_0 (q8_0: n_embd_kv a multiple of 32, else Error(invalid_argument)). Blocks
    // come from `allocator` (host memory unless a device backend's: default_kv_allocator()).
    KvCache(int64_t n_layer, int64_t n_embd_kv, KvType type, KvBlockAllocator& allocator = default_kv_allocator());
    KvBlockAllocator& allocator() const { return *allocator_; }

    KvType kv_type() const { return kv_type_of(type_); }
    TensorType type() const { return type_; }  // the rows' element type, for the kernels
    int64_t n_tokens() const { return n_tokens_; }
    uint64_t row_bytes() const { return row_bytes_; }

    // Makes positions [n_tokens, n) writable (allocating blocks, un-sharing the partly filled last one)
    // and sets n_tokens = n. Positions beyond the old size hold garbage until written.
    void grow(int64_t n);
    // Forgets positions >= n (blocks entirely past n are released).
    void truncate(int64_t n);
    // A cache sharing every block with this one; either side copies a block before writing to it.
    KvCache fork() const;

    // Writable rows: only positions made writable by the last grow() (un-shared blocks).
    uint8_t* k_row(int64_t layer, int64_t pos);
    uint8_t* v_row(int64_t layer, int64_t pos);

    // Sliding-window layers: sliding[layer] != 0 for each such KV layer (n_layer entries). Only on an
    // empty cache (before the first grow).
    void set_sliding_layers(const std::vector<uint8_t>& sliding);
    int64_t n_global_layers() const { return n_global_; }
    bool is_global_layer(int64_t layer) const { return global_index_[static_cast<size_t>(layer)] >= 0; }
    bool has_sliding_layers() const { return n_global_ < n_layer_; }
    // Leading blocks that hold the global layers only; positions before trimmed_until() have no
    // sliding-layer KV.
    int64_t n_trimmed_blocks() const { return n_trimmed_; }
    int64_t trimmed_until() const { return n_trimmed_ * kv_block_tokens; }
    bool block_trimmed(int64_t i) const { return i < n_trimmed_; }
    // Trims every block that lies entirely before position `keep_from` (its global rows are copied into a
    // smaller block; a block shared with a fork stays whole for the fork). No-op without sliding layers.
    void trim_sliding(int64_t keep_from);
    // State-file reader: on a cache of only trimmed blocks, appends trimmed blocks up to position n
    // (a multiple of kv_block_tokens) to be filled through KvBlockStaging::write on writable_block.
    void grow_trimmed(int64_t n);
    uint64_t trimmed_block_bytes() const;  // K+V bytes of one trimmed block
    uint64_t bytes() const;                // K+V bytes of all blocks held (trimmed ones counted small)

    // Read view of one layer for the attention kernel; valid until the next grow/truncate. A sliding
    // layer's pointers to trimmed blocks are null (never read: outside every query's window).
    KvLayerView layer_view(int64_t layer);

    uint64_t block_bytes() const;  // K+V bytes of one block
    int64_t n_blocks() const { return static_cast<int64_t>(blocks_.size()); }
    int64_t n_layer() const { return n_layer_; }
    int64_t n_embd_kv() const { return n_embd_kv_; }

    // Block i: K and V halves of [n_layer][kv_block_tokens][row_bytes] (a trimmed block's are
    // [n_global][kv_block_tokens][row_bytes]); rows past n_tokens in the last block are unspecified. Its
    // bytes are read and written through KvBlockStaging (kv/kv_block_staging.h), the one path for
    // everything but the forward pass. writable_block un-shares the block first.
    const KvBlock& block(int64_t i) const { return *blocks_[static_cast<size_t>(i)]; }
    KvBlock& writable_block(int64_t i);

    // For the prefix cache (engine/prefix_cache*): block i by reference, and a cache made of blocks held
    // elsewhere (whole blocks only: the prefix cache takes no trimmed State). assign_blocks(blocks, n) replaces the
    // contents with `blocks` holding positions [0, n) (blocks.size() == ceil(n / kv_block_tokens), each of this cache's
    // block size); they stay shared, so the first grow() past a shared partly used last block copies it
    // (copy-on-write).
    std::shared_ptr<KvBlock> share_block(int64_t i) const { return blocks_[static_cast<size_t>(i)]; }
    void assign_blocks(std::vector<std::shared_ptr<KvBlock>> blocks, int64_t n);

private:
    void make_unique(size_t block_index);
    std::shared_ptr<KvBlock> new_block(size_t half_bytes) const;

    KvBlockAllocator* allocator_ = &host_kv_allocator();
    int64_t n_layer_ = 0;
    int64_t n_embd_kv_ = 0;
    TensorType type_ = TensorType::F16;
    uint64_t row_bytes_ = 0;
    int64_t n_tokens_ = 0;
    int64_t n_global_ = 0;  // layers that are not sliding-window layers
    int64_t n_trimmed_ = 0;
    std::vector<int64_t> global_index_;  // (n_layer) position among the global layers, -1 for a sliding one
    std::vector<std::shared_ptr<KvBlock>> blocks_;
    // Per-layer block pointer tables handed to the attention kernel (rebuilt by layer_view).
    std::vector<const uint8_t*> k_table_;
    std::vector<const uint8_t*> v_table_;
};

}  // namespace kvstash
