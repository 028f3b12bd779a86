// Which blocks follow a block on disk: "<next key hex>.kvn" next to the block files, listing the keys and
// tokens of cached blocks whose parent is that block (or the domain root). It lets another process end a
// match inside a block, as the RAM tier does: a request that leaves a cached sequence at D = 32·b + k
// finds, from the key of its last matched full block, the cached block b whose first k tokens are its
// own, and shares them. Without it a process sees only whole blocks on disk, so it never learns where it
// left an earlier sequence and never asks for a recurrent checkpoint there (issue 13's A/B/C across
// processes: C would reuse only up to the last block boundary).
//
//   key(next of parent) = XXH3-128("kvstash.next.v1\0" | key(parent))   (16 canonical bytes; the tag
//   keeps these keys apart from block and checkpoint keys in the one directory)
//
// Layout (little-endian, 80-byte header, then n entries of 144 bytes):
//     0  magic "KVSNEXTB"                        8 bytes
//     8  u32 version (1)     12  u32 header bytes (80)
//    16  parent key[16]      32  model fingerprint[16]
//    48  u32 kv type (0 f16, 1 f32)   52  u32 numerics path  56  u32 n entries (1..16)   60  u32 0
//    64  u64 XXH3-64 of the entries   72  u64 XXH3-64 of bytes [0, 72)
//    80  entries, most recently added first: child key[16], then its 32 token ids as i32
//
// An entry is a hint, never trusted: the child's block file is read and verified as any block file
// (its header repeats its key, parent and tokens). The list is rewritten atomically (read, add, write a
// temp file, rename); two processes adding at once may lose one entry (a later miss, never a wrong
// answer), and it keeps the kMaxNextBlocks most recent children. As for blocks and checkpoints, a file
// of another model, KV type or numerics, a renamed, torn or corrupt file is refused.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/prefix_cache_disk_file.h"

namespace kvstash {

constexpr uint64_t kNextFileHeaderBytes = 80;
constexpr uint64_t kNextFileEntryBytes = 16 + 4 * kv_block_tokens;
constexpr uint32_t kMaxNextBlocks = 16;
constexpr const char* kNextFileSuffix = ".kvn";

// A cached block following the parent: its key and tokens (its file's name and header fields).
struct NextBlock {
    BlockKey key;
    std::array<int32_t, kv_block_tokens> tokens{};
};

// The key under which the blocks following `parent` are listed.
BlockKey next_blocks_key(const BlockKey& parent);
std::string next_file_name(const BlockKey& next_key);
std::optional<BlockKey> parse_next_file_name(const std::string& name);
uint64_t next_file_bytes(size_t n_entries);

enum class NextFileRead { ok, missing, rejected };

// Reads "<dir>/<next_blocks_key(parent)>.kvn" into `out` (1..kMaxNextBlocks entries) after checking its
// size, header (parent, model, KV type, numerics path) and checksums; `out` is empty unless the result is ok. Sets
// the file's times to now (recency for the tier's LRU order).
NextFileRead read_next_file(const std::string& dir, const BlockKey& parent, const BlockFileIdentity& id,
                            std::vector<NextBlock>& out);

// Writes the list atomically (temp file + rename, no fsync: a torn file fails its checksums). `entries`
// must hold 1..kMaxNextBlocks entries. False on any I/O error.
bool write_next_file(const std::string& dir, const BlockKey& parent, const BlockFileIdentity& id,
                     const std::vector<NextBlock>& entries);

}  // namespace kvstash
