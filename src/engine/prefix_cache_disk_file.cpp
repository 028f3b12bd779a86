// Block files of the prefix cache's disk tier (layout in prefix_cache_disk_file.h).
#include "engine/prefix_cache_disk_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <array>
#include <cstring>

#include "base/atomic_file.h"
#include "base/fd.h"

namespace kvstash {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'B', 'L', 'O', 'C', 'K'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderChecksumAt = 232;
using Header = std::array<uint8_t, kBlockFileHeaderBytes>;

template <typename T>
void put(Header& h, size_t at, T value) {
    std::memcpy(h.data() + at, &value, sizeof value);
}

void put_key(Header& h, size_t at, const BlockKey& key) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH128_hash_t{key.low, key.high});
    std::memcpy(h.data() + at, canonical.digest, 16);
}

uint64_t payload_checksum(const uint8_t* k, const uint8_t* v, uint64_t half) {
    XXH3_state_t* state = XXH3_createState();
    if (state == nullptr) return 0;  // allocation failure: a 0 checksum makes the file unusable, not wrong
    XXH3_64bits_reset(state);
    XXH3_64bits_update(state, k, half);
    XXH3_64bits_update(state, v, half);
    const uint64_t sum = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    return sum;
}

// The header this block would have with this payload checksum.
Header make_header(const BlockFileName& block, const BlockFileIdentity& id, uint64_t checksum) {
    Header h{};
    std::memcpy(h.data(), kMagic, sizeof kMagic);
    put<uint32_t>(h, 8, kVersion);
    put<uint32_t>(h, 12, static_cast<uint32_t>(kBlockFileHeaderBytes));
    put_key(h, 16, block.key);
    put_key(h, 32, block.parent);
    std::memcpy(h.data() + 48, id.model.bytes.data(), 16);
    put<uint32_t>(h, 64, id.kv_type);
    put<uint32_t>(h, 68, id.numerics_path);
    put<uint32_t>(h, 72, id.n_layer);
    put<uint32_t>(h, 76, static_cast<uint32_t>(kv_block_tokens));
    put<uint64_t>(h, 80, id.row_bytes);
    put<uint64_t>(h, 88, 2 * id.half_bytes());
    std::memcpy(h.data() + 96, block.tokens.data(), 4 * kv_block_tokens);
    put<uint64_t>(h, 224, checksum);
    put<uint64_t>(h, kHeaderChecksumAt, XXH3_64bits(h.data(), kHeaderChecksumAt));
    return h;
}

}  // namespace

std::string block_file_name(const BlockKey& key) { return key.hex() + kBlockFileSuffix; }

std::optional<BlockKey> parse_block_file_name(const std::string& name) {
    const size_t suffix = std::strlen(kBlockFileSuffix);
    if (name.size() != 32 + suffix || name.compare(32, suffix, kBlockFileSuffix) != 0) return std::nullopt;
    BlockKey key;
    for (size_t i = 0; i < 32; ++i) {
        const char c = name[i];
        uint64_t digit = 0;
        if (c >= '0' && c <= '9') {
            digit = static_cast<uint64_t>(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            digit = static_cast<uint64_t>(c - 'a' + 10);
        } else {
            return std::nullopt;  // BlockKey::hex() writes lowercase only
        }
        uint64_t& half = i < 16 ? key.high : key.low;
        half = half << 4 | digit;
    }
    return key;
}

bool write_block_file(const std::string& dir, const BlockFileName& block, const BlockFileIdentity& id,
                      std::span<const uint8_t> k, std::span<const uint8_t> v) {
    const uint64_t half = id.half_bytes();
    if (k.size() != half || v.size() != half) return false;
    const Header header = make_header(block, id, payload_checksum(k.data(), v.data(), half));
    const auto bytes = [](const uint8_t* p, size_t n) { return std::string_view(reinterpret_cast<const char*>(p), n); };
    // No fsync: a block torn by a crash fails its checksum and is a miss. The temporary file's name starts
    // with atomic_file::kTempPrefix, never parsed as a block file (PrefixDiskTier::scan removes stale ones).
    return atomic_file::try_write(dir + "/" + block_file_name(block.key),
                                  {bytes(header.data(), header.size()), bytes(k.data(), half), bytes(v.data(), half)},
                                  atomic_file::Durability::none);
}

BlockFileRead read_block_file(const std::string& dir, const BlockFileName& block, const BlockFileIdentity& id,
                              uint8_t* k, uint8_t* v) {
    const std::string path = dir + "/" + block_file_name(block.key);
    const Fd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));  // a FIFO: no wait, refused below
    // Any failure to open (gone, or unreadable to us) is a miss: nothing here says the file is bad.
    if (!in.valid()) return BlockFileRead::missing;
    struct stat st {};
    if (::fstat(in.get(), &st) != 0) return BlockFileRead::missing;
    if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != id.file_bytes()) return BlockFileRead::rejected;

    Header header{};
    if (!read_all_at(in.get(), header.data(), header.size(), 0)) return BlockFileRead::rejected;
    uint64_t stored_checksum = 0;
    std::memcpy(&stored_checksum, header.data() + 224, 8);
    // Every field at once: the header we would write for this block with the stored payload checksum.
    const Header expected = make_header(block, id, stored_checksum);
    if (header != expected) return BlockFileRead::rejected;

    const uint64_t half = id.half_bytes();
    if (!read_all_at(in.get(), k, half, kBlockFileHeaderBytes) ||
        !read_all_at(in.get(), v, half, kBlockFileHeaderBytes + half)) {
        return BlockFileRead::rejected;
    }
    if (payload_checksum(k, v, half) != stored_checksum) return BlockFileRead::rejected;
    ::futimens(in.get(), nullptr);  // now: the tier's LRU order, shared with other processes through mtime
    return BlockFileRead::ok;
}

std::string encode_block_bytes(const BlockFileName& block, const BlockFileIdentity& id, std::span<const uint8_t> k,
                               std::span<const uint8_t> v) {
    const uint64_t half = id.half_bytes();
    if (k.size() != half || v.size() != half) return {};
    const Header header = make_header(block, id, payload_checksum(k.data(), v.data(), half));
    std::string out;
    out.reserve(id.file_bytes());
    out.append(reinterpret_cast<const char*>(header.data()), header.size());
    out.append(reinterpret_cast<const char*>(k.data()), half);
    out.append(reinterpret_cast<const char*>(v.data()), half);
    return out;
}

BlockFileRead decode_block_bytes(std::string_view bytes, const BlockFileName& block, const BlockFileIdentity& id,
                                 uint8_t* k, uint8_t* v) {
    if (bytes.size() != id.file_bytes()) return BlockFileRead::rejected;
    Header header{};
    std::memcpy(header.data(), bytes.data(), header.size());
    uint64_t stored_checksum = 0;
    std::memcpy(&stored_checksum, header.data() + 224, 8);
    if (header != make_header(block, id, stored_checksum)) return BlockFileRead::rejected;
    const uint64_t half = id.half_bytes();
    std::memcpy(k, bytes.data() + kBlockFileHeaderBytes, half);
    std::memcpy(v, bytes.data() + kBlockFileHeaderBytes + half, half);
    return payload_checksum(k, v, half) == stored_checksum ? BlockFileRead::ok : BlockFileRead::rejected;
}

}  // namespace kvstash
