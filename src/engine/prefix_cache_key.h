// Content addresses of cached KV blocks: a block's key names the whole prefix up to the block's end, so
// equal keys mean bitwise-equal KV (batch invariance) and a disk or remote tier can share blocks by key.
//
//   root(domain)  = XXH3-128("kvstash.prefix.v1" | fingerprint | kv type | numerics path | numerics epoch)
//   key(block i)  = XXH3-128(<the root's input> | key(block i-1) | 32 token ids)
// with key(block -1) = root. Fields are fixed-size, little-endian: the tag's 17 bytes, the model (+
// adapters) fingerprint's 16 canonical bytes, kv type as u32 (kv_block_code), the kernel path as u32
// (backends/cpu/runtime/numerics.h NumericsPath: scalar, avx2, avx512, avx512-vnni round differently, so KV computed
// on one path is not bitwise the KV another computes), the numerics epoch as u32 (raised when a kvstash
// version changes any path's bits: blocks a disk or Redis tier kept from an older build are then misses,
// never reused), the parent key's 16 canonical bytes, the tokens as 32 × i32.
//
// Recurrent checkpoints (models with Mamba layers): the recurrent state after the first P tokens, with
// P = 32·b + k (0 <= k < 32), hangs off the key of the full block before it (block b-1, or the root):
//   key(checkpoint P) = XXH3-128("kvstash.recur.v1\0" | fingerprint | kv type | path | epoch | key(block b-1) |
//                                u32 k | the k token ids of [32·b, P) as i32)
// The different tag keeps checkpoint keys apart from block keys (one 128-bit namespace, one directory).
// The KV type is in it because a hybrid's recurrent layers read its attention layers' (rounded) KV.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/runtime/numerics.h"
#include "kv/kv_cache.h"
#include "kvstash/kv_type.h"
#include "state/fingerprint.h"

namespace kvstash {

struct BlockKey {
    uint64_t high = 0, low = 0;  // XXH3-128 halves; canonical bytes are high then low, big-endian
    bool operator==(const BlockKey&) const = default;
    std::string hex() const;  // 32 lowercase hex digits, canonical order
};

struct BlockKeyHash {
    size_t operator()(const BlockKey& key) const noexcept { return static_cast<size_t>(key.low); }
};

// The KV type's code in block keys and block files: u32, 0 = f16, 1 = f32.
uint32_t kv_block_code(KvType kv_type);

// What every key of one tree shares: the model, the KV type and the numerics (kernel path, epoch) that
// computed it: current_numerics() for this process's blocks.
class PrefixKeyDomain {
public:
    PrefixKeyDomain(const ModelFingerprint& model, KvType kv_type, Numerics numerics);

    BlockKey root() const { return root_; }
    BlockKey block(const BlockKey& parent, std::span<const int32_t, kv_block_tokens> tokens) const;
    // The key of the checkpoint after `partial` (fewer than kv_block_tokens tokens) following `parent`.
    BlockKey checkpoint(const BlockKey& parent, std::span<const int32_t> partial) const;
    // Keys of the first n_blocks full blocks of `tokens` (tokens.size() >= n_blocks * kv_block_tokens).
    std::vector<BlockKey> chain(std::span<const int32_t> tokens, int64_t n_blocks) const;

private:
    static constexpr size_t kHeaderBytes = 17 + 16 + 4 + 4 + 4;
    std::array<uint8_t, kHeaderBytes> header_{};
    BlockKey root_;
};

}  // namespace kvstash
