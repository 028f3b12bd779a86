// One recurrent checkpoint of the prefix cache's disk tier as a file: "<checkpoint key hex>.rck" next to
// the block files (checkpoint keys and block keys never coincide: prefix_cache_key.h).
//
// Layout (little-endian, 272-byte header, then the payload):
//     0  magic "KVSRECUR"                        8 bytes
//     8  u32 version (1)     12  u32 header bytes (272)
//    16  key[16]             32  parent key[16]          (canonical BlockKey bytes)
//    48  model fingerprint[16]
//    64  u32 kv type (0 f16, 1 f32)   68  u32 numerics path  72  u32 KV n_layer   76  u32 k (partial tokens)
//    80  u64 KV row bytes    88  u64 position P (= 32·b + k)
//    96  u64 recurrent layers   104  u64 conv floats per layer   112  u64 scan floats per layer
//   120  u64 payload bytes
//   128  the k partial tokens [32·b, P) as i32, zero-padded to 31     252  4 zero bytes
//   256  u64 XXH3-64 of the payload          264  u64 XXH3-64 of bytes [0, 264)
//   272  payload: the recurrent state's floats (f32, RecurrentState::floats() order), then, when k > 0,
//        the tail block's K then V, each [KV n_layer][32][row bytes] as in KvBlock (only its first k
//        positions are meaningful; a model without attention layers has none).
//
// As for blocks, every header field is checked against what the reader expects (another model's file,
// another KV type or numerics, a renamed, torn or corrupt file is refused).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/prefix_cache_disk_file.h"
#include "kv/recurrent_state.h"

namespace kvstash {

constexpr uint64_t kCheckpointFileHeaderBytes = 272;
constexpr const char* kCheckpointFileSuffix = ".rck";

// The checkpoint a file holds: its key, its parent (the full block before it, or the domain root), its
// position and partial tokens (k = partial.size() < 32).
struct CheckpointFileName {
    BlockKey key, parent;
    int64_t pos = 0;
    std::span<const int32_t> partial;
};

// The reader's expectations: the block identity (model, KV type, numerics path, KV shape) and the recurrent shape.
struct CheckpointFileIdentity {
    BlockFileIdentity blocks;
    RecurrentShape recurrent;

    uint64_t state_bytes() const { return static_cast<uint64_t>(recurrent.floats()) * sizeof(float); }
    uint64_t tail_bytes(size_t k) const { return k > 0 ? 2 * blocks.half_bytes() : 0; }
    uint64_t file_bytes(size_t k) const { return kCheckpointFileHeaderBytes + state_bytes() + tail_bytes(k); }
};

std::string checkpoint_file_name(const BlockKey& key);
std::optional<BlockKey> parse_checkpoint_file_name(const std::string& name);

// Writes atomically (temp file + rename, no fsync, as block files). `state` must have id.recurrent's
// shape; `k`/`v` are the tail block's halves (id.blocks.half_bytes() each) when the partial is not
// empty, else empty. False on any I/O error.
bool write_checkpoint_file(const std::string& dir, const CheckpointFileName& name, const CheckpointFileIdentity& id,
                           std::span<const float> state, std::span<const uint8_t> k, std::span<const uint8_t> v);

// Reads and verifies the file into `state` (id.recurrent.floats()) and, when the partial is not empty,
// `k`/`v` (id.blocks.half_bytes() each). missing / rejected as for block files.
BlockFileRead read_checkpoint_file(const std::string& dir, const CheckpointFileName& name,
                                   const CheckpointFileIdentity& id, float* state, uint8_t* k, uint8_t* v);

}  // namespace kvstash
