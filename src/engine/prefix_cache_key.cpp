// Block keys of the prefix cache (layout in prefix_cache_key.h).
#include "engine/prefix_cache_key.h"

#include <xxhash.h>

#include <bit>
#include <cstdio>
#include <cstring>

#include "backends/cpu/runtime/numerics.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

static_assert(std::endian::native == std::endian::little,
              "block keys hash token ids in their in-memory (little-endian) form");

constexpr char kTag[17] = {'k', 'v', 's', 't', 'a', 's', 'h', '.', 'p', 'r', 'e', 'f', 'i', 'x', '.', 'v', '1'};

constexpr char kCheckpointTag[17] = {'k', 'v', 's', 't', 'a', 's', 'h', '.', 'r',
                                     'e', 'c', 'u', 'r', '.', 'v', '1', '\0'};

BlockKey to_key(XXH128_hash_t h) { return BlockKey{h.high64, h.low64}; }

void put_u32(uint8_t* out, uint32_t v) { std::memcpy(out, &v, 4); }

// The key's canonical (big-endian) bytes, as XXH128_canonicalFromHash writes them.
void put_key(uint8_t* out, const BlockKey& key) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH128_hash_t{key.low, key.high});
    std::memcpy(out, canonical.digest, 16);
}

}  // namespace

std::string BlockKey::hex() const {
    char text[33];
    std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(high),
                  static_cast<unsigned long long>(low));
    return text;
}

uint32_t kv_block_code(KvType kv_type) {
    return kv_type == KvType::f16 ? 0u : kv_type == KvType::f32 ? 1u : 8u;  // 8: q8_0, its ggml type
}

PrefixKeyDomain::PrefixKeyDomain(const ModelFingerprint& model, KvType kv_type, Isa isa) {
    uint8_t* out = header_.data();
    std::memcpy(out, kTag, sizeof kTag);
    std::memcpy(out + 17, model.bytes.data(), 16);
    put_u32(out + 33, kv_block_code(kv_type));
    // A device backend chosen for the process (--device cuda) computes the blocks: its path, not the CPU's.
    const Numerics device = current_numerics();
    const Numerics numerics = is_cuda_path(device.path) ? device : numerics_of(isa);
    put_u32(out + 37, static_cast<uint32_t>(numerics.path));
    put_u32(out + 41, numerics.epoch);
    root_ = to_key(XXH3_128bits(header_.data(), header_.size()));
}

BlockKey PrefixKeyDomain::block(const BlockKey& parent, std::span<const int32_t, kv_block_tokens> tokens) const {
    std::array<uint8_t, kHeaderBytes + 16 + 4 * kv_block_tokens> bytes;
    std::memcpy(bytes.data(), header_.data(), kHeaderBytes);
    put_key(bytes.data() + kHeaderBytes, parent);
    std::memcpy(bytes.data() + kHeaderBytes + 16, tokens.data(), 4 * kv_block_tokens);
    return to_key(XXH3_128bits(bytes.data(), bytes.size()));
}

BlockKey PrefixKeyDomain::checkpoint(const BlockKey& parent, std::span<const int32_t> partial) const {
    if (partial.size() >= static_cast<size_t>(kv_block_tokens)) {
        throw Error(ErrorCode::internal, "a checkpoint key's partial block must be shorter than a block");
    }
    std::array<uint8_t, kHeaderBytes + 16 + 4 + 4 * kv_block_tokens> bytes{};
    std::memcpy(bytes.data(), header_.data(), kHeaderBytes);
    std::memcpy(bytes.data(), kCheckpointTag, sizeof kCheckpointTag);
    put_key(bytes.data() + kHeaderBytes, parent);
    put_u32(bytes.data() + kHeaderBytes + 16, static_cast<uint32_t>(partial.size()));
    std::memcpy(bytes.data() + kHeaderBytes + 20, partial.data(), 4 * partial.size());
    return to_key(XXH3_128bits(bytes.data(), kHeaderBytes + 20 + 4 * partial.size()));
}

std::vector<BlockKey> PrefixKeyDomain::chain(std::span<const int32_t> tokens, int64_t n_blocks) const {
    if (n_blocks < 0 || static_cast<uint64_t>(n_blocks) * kv_block_tokens > tokens.size()) {
        throw Error(ErrorCode::internal, "prefix key chain longer than its tokens");
    }
    std::vector<BlockKey> keys;
    keys.reserve(static_cast<size_t>(n_blocks));
    BlockKey parent = root_;
    for (int64_t b = 0; b < n_blocks; ++b) {
        parent = block(parent, tokens.subspan(static_cast<size_t>(b * kv_block_tokens)).first<kv_block_tokens>());
        keys.push_back(parent);
    }
    return keys;
}

}  // namespace kvstash
