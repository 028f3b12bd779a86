// One KV block of the prefix cache's disk tier as a file: "<key hex>.kvb" under the cache directory.
//
// Layout (little-endian, 240-byte header, then the payload):
//     0  magic "KVSBLOCK"                        8 bytes
//     8  u32 version (1)     12  u32 header bytes (240)
//    16  key[16]             32  parent key[16]          (canonical BlockKey bytes, as in the name)
//    48  model fingerprint[16]
//    64  u32 kv type (0 f16, 1 f32)   68  u32 numerics path   72  u32 n_layer   76  u32 block tokens (32)
//    80  u64 row bytes (one token's K or V row in one layer)   88  u64 payload bytes (K + V)
//    96  the block's 32 token ids, i32 each
//   224  u64 XXH3-64 of the payload          232  u64 XXH3-64 of bytes [0, 232)
//   240  payload: K then V, each [n_layer][32][row bytes] as in KvBlock
//
// The key already binds the model, KV type, numerics (path and epoch) and every token up to the block's
// end; the header repeats what it was made of so that a file is used only when each field matches the
// request (another model's file, a renamed file, a torn or corrupt file are all refused, never trusted by
// name alone). The numerics path is backends/cpu/runtime/numerics.h's NumericsPath code, the one identity state files
// and keys use (files written before it held the Isa code there, which no reader now matches: a miss).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/prefix_cache_key.h"
#include "kv/kv_cache.h"
#include "state/fingerprint.h"

namespace kvstash {

constexpr uint64_t kBlockFileHeaderBytes = 240;
constexpr const char* kBlockFileSuffix = ".kvb";

// What a block file must have been made by: the key domain and the KV block shape of the reader.
struct BlockFileIdentity {
    ModelFingerprint model;
    uint32_t kv_type = 0;        // 0 f16, 1 f32 (as in the key)
    uint32_t numerics_path = 0;  // NumericsPath as u32 (as in the key)
    uint32_t n_layer = 0;
    uint64_t row_bytes = 0;

    uint64_t half_bytes() const { return uint64_t{n_layer} * kv_block_tokens * row_bytes; }  // K (or V) bytes
    uint64_t file_bytes() const { return kBlockFileHeaderBytes + 2 * half_bytes(); }
};

// The block a file holds: its key, its parent's key (the previous block's, or the domain root) and tokens.
struct BlockFileName {
    BlockKey key, parent;
    std::span<const int32_t, kv_block_tokens> tokens;
};

// "<32 hex digits>.kvb" for `key`; the key of such a name, nullopt for any other name.
std::string block_file_name(const BlockKey& key);
std::optional<BlockKey> parse_block_file_name(const std::string& name);

// Writes the block atomically: a unique temp file in `dir`, then rename over "<dir>/<key>.kvb" (an
// identical file another process wrote meanwhile is simply replaced). No fsync: this is a cache, and a
// file torn by a power loss fails its checksum and is deleted by the next reader. Returns false (and
// leaves no temp file) on any I/O error; `k` and `v` must be id.half_bytes() each.
bool write_block_file(const std::string& dir, const BlockFileName& block, const BlockFileIdentity& id,
                      std::span<const uint8_t> k, std::span<const uint8_t> v);

enum class BlockFileRead {
    ok,        // k and v hold the verified payload; the file's times were set to now (recency for LRU)
    missing,   // no such file (never written, or another process evicted it): a plain miss
    rejected,  // the file exists but is not this block of this model (header, size or checksum differ)
};

// Reads "<dir>/<key>.kvb" into k and v (id.half_bytes() each) and verifies every header field against
// `block` and `id`, then the payload checksum. k and v are unspecified unless the result is ok.
BlockFileRead read_block_file(const std::string& dir, const BlockFileName& block, const BlockFileIdentity& id,
                              uint8_t* k, uint8_t* v);

// The same bytes as a block file, in memory (the Redis tier's values, prefix_cache_redis.h), and their
// verification: every header field against `block` and `id`, the size, then the payload checksum into k
// and v (id.half_bytes() each). decode answers ok or rejected, never missing.
std::string encode_block_bytes(const BlockFileName& block, const BlockFileIdentity& id, std::span<const uint8_t> k,
                               std::span<const uint8_t> v);
BlockFileRead decode_block_bytes(std::string_view bytes, const BlockFileName& block, const BlockFileIdentity& id,
                                 uint8_t* k, uint8_t* v);

}  // namespace kvstash
