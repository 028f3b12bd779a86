// Next-block lists of the prefix cache's disk tier (layout in prefix_cache_disk_next.h).
#include "engine/prefix_cache_disk_next.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <cstring>

#include "base/atomic_file.h"
#include "base/fd.h"

namespace kvstash {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'N', 'E', 'X', 'T', 'B'};
constexpr char kTag[16] = {'k', 'v', 's', 't', 'a', 's', 'h', '.', 'n', 'e', 'x', 't', '.', 'v', '1', '\0'};
constexpr uint32_t kVersion = 1;
constexpr size_t kEntriesChecksumAt = 64;
constexpr size_t kHeaderChecksumAt = 72;
using Header = std::array<uint8_t, kNextFileHeaderBytes>;

template <typename T>
void put(uint8_t* out, T value) {
    std::memcpy(out, &value, sizeof value);
}

void put_key(uint8_t* out, const BlockKey& key) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH128_hash_t{key.low, key.high});
    std::memcpy(out, canonical.digest, 16);
}

BlockKey get_key(const uint8_t* in) {
    XXH128_canonical_t canonical;
    std::memcpy(canonical.digest, in, 16);
    const XXH128_hash_t h = XXH128_hashFromCanonical(&canonical);
    return BlockKey{h.high64, h.low64};
}

Header make_header(const BlockKey& parent, const BlockFileIdentity& id, size_t n_entries, uint64_t checksum) {
    Header h{};
    std::memcpy(h.data(), kMagic, sizeof kMagic);
    put<uint32_t>(h.data() + 8, kVersion);
    put<uint32_t>(h.data() + 12, static_cast<uint32_t>(kNextFileHeaderBytes));
    put_key(h.data() + 16, parent);
    std::memcpy(h.data() + 32, id.model.bytes.data(), 16);
    put<uint32_t>(h.data() + 48, id.kv_type);
    put<uint32_t>(h.data() + 52, id.numerics_path);
    put<uint32_t>(h.data() + 56, static_cast<uint32_t>(n_entries));
    put<uint64_t>(h.data() + kEntriesChecksumAt, checksum);
    put<uint64_t>(h.data() + kHeaderChecksumAt, XXH3_64bits(h.data(), kHeaderChecksumAt));
    return h;
}

}  // namespace

BlockKey next_blocks_key(const BlockKey& parent) {
    uint8_t bytes[sizeof kTag + 16];
    std::memcpy(bytes, kTag, sizeof kTag);
    put_key(bytes + sizeof kTag, parent);
    const XXH128_hash_t h = XXH3_128bits(bytes, sizeof bytes);
    return BlockKey{h.high64, h.low64};
}

std::string next_file_name(const BlockKey& next_key) { return next_key.hex() + kNextFileSuffix; }

std::optional<BlockKey> parse_next_file_name(const std::string& name) {
    const size_t suffix = std::strlen(kNextFileSuffix);
    if (name.size() != 32 + suffix || name.compare(32, suffix, kNextFileSuffix) != 0) return std::nullopt;
    return parse_block_file_name(name.substr(0, 32) + kBlockFileSuffix);
}

uint64_t next_file_bytes(size_t n_entries) { return kNextFileHeaderBytes + n_entries * kNextFileEntryBytes; }

bool write_next_file(const std::string& dir, const BlockKey& parent, const BlockFileIdentity& id,
                     const std::vector<NextBlock>& entries) {
    if (entries.empty() || entries.size() > kMaxNextBlocks) return false;
    std::vector<uint8_t> body(entries.size() * kNextFileEntryBytes);
    for (size_t i = 0; i < entries.size(); ++i) {
        uint8_t* at = body.data() + i * kNextFileEntryBytes;
        put_key(at, entries[i].key);
        std::memcpy(at + 16, entries[i].tokens.data(), 4 * kv_block_tokens);
    }
    const Header header = make_header(parent, id, entries.size(), XXH3_64bits(body.data(), body.size()));
    const auto bytes = [](const uint8_t* p, size_t n) { return std::string_view(reinterpret_cast<const char*>(p), n); };
    return atomic_file::try_write(dir + "/" + next_file_name(next_blocks_key(parent)),
                                  {bytes(header.data(), header.size()), bytes(body.data(), body.size())},
                                  atomic_file::Durability::none);
}

NextFileRead read_next_file(const std::string& dir, const BlockKey& parent, const BlockFileIdentity& id,
                            std::vector<NextBlock>& out) {
    out.clear();
    const std::string path = dir + "/" + next_file_name(next_blocks_key(parent));
    const Fd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));  // a FIFO: no wait, refused below
    if (!in.valid()) return NextFileRead::missing;
    struct stat st {};
    if (::fstat(in.get(), &st) != 0) return NextFileRead::missing;
    const auto size = static_cast<uint64_t>(st.st_size);
    if (!S_ISREG(st.st_mode) || size < next_file_bytes(1) || size > next_file_bytes(kMaxNextBlocks) ||
        (size - kNextFileHeaderBytes) % kNextFileEntryBytes != 0)
        return NextFileRead::rejected;
    const size_t n_entries = (size - kNextFileHeaderBytes) / kNextFileEntryBytes;

    Header header{};
    std::vector<uint8_t> body(n_entries * kNextFileEntryBytes);
    if (!read_all_at(in.get(), header.data(), header.size(), 0) ||
        !read_all_at(in.get(), body.data(), body.size(), kNextFileHeaderBytes))
        return NextFileRead::rejected;
    uint64_t stored_checksum = 0;
    std::memcpy(&stored_checksum, header.data() + kEntriesChecksumAt, 8);
    if (header != make_header(parent, id, n_entries, stored_checksum) ||
        XXH3_64bits(body.data(), body.size()) != stored_checksum)
        return NextFileRead::rejected;
    out.resize(n_entries);
    for (size_t i = 0; i < n_entries; ++i) {
        const uint8_t* at = body.data() + i * kNextFileEntryBytes;
        out[i].key = get_key(at);
        std::memcpy(out[i].tokens.data(), at + 16, 4 * kv_block_tokens);
    }
    ::futimens(in.get(), nullptr);  // recency for the tier's LRU order, shared with other processes
    return NextFileRead::ok;
}

}  // namespace kvstash
