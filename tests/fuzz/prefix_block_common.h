// The block and reader identities that fuzz_prefix_block and its seed generator share: two KV block
// shapes (f16, 1 layer, 8-byte rows; f32, 2 layers, 16-byte rows) of one made-up model and one block.
#pragma once

#include <xxhash.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/prefix_cache_disk_file.h"

namespace kvstash::fuzz {

inline const std::array<int32_t, kv_block_tokens>& block_tokens() {
    static const std::array<int32_t, kv_block_tokens> tokens = [] {
        std::array<int32_t, kv_block_tokens> t{};
        for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(1000 + 7 * i);
        return t;
    }();
    return tokens;
}

inline BlockFileName block_name() {
    return BlockFileName{BlockKey{0x0123456789abcdefu, 0xfedcba9876543210u}, BlockKey{0x1111, 0x2222}, block_tokens()};
}

inline std::vector<BlockFileIdentity> identities() {
    ModelFingerprint model;
    for (size_t i = 0; i < model.bytes.size(); ++i) model.bytes[i] = static_cast<uint8_t>(0xA0 + i);
    return {BlockFileIdentity{model, 0, 1, 1, 8}, BlockFileIdentity{model, 1, 2, 2, 16}};
}

// The payload a seed carries for `id`: K then V, a byte pattern.
inline std::vector<uint8_t> payload(const BlockFileIdentity& id) {
    std::vector<uint8_t> p(2 * id.half_bytes());
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 13 + 5);
    return p;
}

inline std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// The bytes write_block_file makes for `id` (written into `dir`, then read back).
inline std::vector<uint8_t> valid_file(const std::string& dir, const BlockFileIdentity& id) {
    const std::vector<uint8_t> p = payload(id);
    const uint64_t half = id.half_bytes();
    if (!write_block_file(dir, block_name(), id, {p.data(), half}, {p.data() + half, half})) return {};
    return read_file(dir + "/" + block_file_name(block_name().key));
}

// Makes both checksums right for whatever the header and payload now hold (payload checksum at 224 over
// bytes [240, end), header checksum at 232 over [0, 232)), so that mutations reach past them.
inline void rewrite_checksums(std::vector<uint8_t>& file) {
    if (file.size() < kBlockFileHeaderBytes) return;
    const uint64_t payload_sum = XXH3_64bits(file.data() + kBlockFileHeaderBytes, file.size() - kBlockFileHeaderBytes);
    std::memcpy(file.data() + 224, &payload_sum, 8);
    const uint64_t header_sum = XXH3_64bits(file.data(), 232);
    std::memcpy(file.data() + 232, &header_sum, 8);
}

}  // namespace kvstash::fuzz
