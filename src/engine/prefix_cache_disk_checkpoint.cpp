// Checkpoint files of the prefix cache's disk tier (layout in prefix_cache_disk_checkpoint.h).
#include "engine/prefix_cache_disk_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <array>
#include <cstring>

#include "base/atomic_file.h"
#include "base/fd.h"

namespace kvstash {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'R', 'E', 'C', 'U', 'R'};
constexpr uint32_t kVersion = 1;
constexpr size_t kPayloadChecksumAt = 256;
constexpr size_t kHeaderChecksumAt = 264;
using Header = std::array<uint8_t, kCheckpointFileHeaderBytes>;

template <typename T>
void put(Header& h, size_t at, T value) {
    std::memcpy(h.data() + at, &value, sizeof value);
}

void put_key(Header& h, size_t at, const BlockKey& key) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH128_hash_t{key.low, key.high});
    std::memcpy(h.data() + at, canonical.digest, 16);
}

uint64_t payload_checksum(std::span<const uint8_t> state, const uint8_t* k, const uint8_t* v, uint64_t half) {
    XXH3_state_t* xxh = XXH3_createState();
    if (xxh == nullptr) return 0;  // a 0 checksum makes the file unusable, not wrong
    XXH3_64bits_reset(xxh);
    XXH3_64bits_update(xxh, state.data(), state.size());
    if (half > 0) {
        XXH3_64bits_update(xxh, k, half);
        XXH3_64bits_update(xxh, v, half);
    }
    const uint64_t sum = XXH3_64bits_digest(xxh);
    XXH3_freeState(xxh);
    return sum;
}

Header make_header(const CheckpointFileName& name, const CheckpointFileIdentity& id, uint64_t checksum) {
    Header h{};
    const size_t k = name.partial.size();
    std::memcpy(h.data(), kMagic, sizeof kMagic);
    put<uint32_t>(h, 8, kVersion);
    put<uint32_t>(h, 12, static_cast<uint32_t>(kCheckpointFileHeaderBytes));
    put_key(h, 16, name.key);
    put_key(h, 32, name.parent);
    std::memcpy(h.data() + 48, id.blocks.model.bytes.data(), 16);
    put<uint32_t>(h, 64, id.blocks.kv_type);
    put<uint32_t>(h, 68, id.blocks.numerics_path);
    put<uint32_t>(h, 72, id.blocks.n_layer);
    put<uint32_t>(h, 76, static_cast<uint32_t>(k));
    put<uint64_t>(h, 80, id.blocks.row_bytes);
    put<uint64_t>(h, 88, static_cast<uint64_t>(name.pos));
    put<uint64_t>(h, 96, static_cast<uint64_t>(id.recurrent.n_layer));
    put<uint64_t>(h, 104, static_cast<uint64_t>(id.recurrent.conv_floats));
    put<uint64_t>(h, 112, static_cast<uint64_t>(id.recurrent.scan_floats));
    put<uint64_t>(h, 120, id.state_bytes() + id.tail_bytes(k));
    if (k > 0) std::memcpy(h.data() + 128, name.partial.data(), 4 * k);
    put<uint64_t>(h, kPayloadChecksumAt, checksum);
    put<uint64_t>(h, kHeaderChecksumAt, XXH3_64bits(h.data(), kHeaderChecksumAt));
    return h;
}

bool valid(const CheckpointFileName& name) {
    return name.partial.size() < static_cast<size_t>(kv_block_tokens) && name.pos >= 0 &&
           name.pos % kv_block_tokens == static_cast<int64_t>(name.partial.size());
}

}  // namespace

std::string checkpoint_file_name(const BlockKey& key) { return key.hex() + kCheckpointFileSuffix; }

std::optional<BlockKey> parse_checkpoint_file_name(const std::string& name) {
    const size_t suffix = std::strlen(kCheckpointFileSuffix);
    if (name.size() != 32 + suffix || name.compare(32, suffix, kCheckpointFileSuffix) != 0) return std::nullopt;
    // The 32 hex digits parse as a block file's name would.
    return parse_block_file_name(name.substr(0, 32) + kBlockFileSuffix);
}

bool write_checkpoint_file(const std::string& dir, const CheckpointFileName& name, const CheckpointFileIdentity& id,
                           std::span<const float> state, std::span<const uint8_t> k, std::span<const uint8_t> v) {
    const uint64_t half = id.tail_bytes(name.partial.size()) / 2;
    if (!valid(name) || state.size_bytes() != id.state_bytes() || k.size() != half || v.size() != half) return false;
    const std::span<const uint8_t> state_bytes(reinterpret_cast<const uint8_t*>(state.data()), state.size_bytes());
    const Header header = make_header(name, id, payload_checksum(state_bytes, k.data(), v.data(), half));
    const auto bytes = [](const uint8_t* p, size_t n) { return std::string_view(reinterpret_cast<const char*>(p), n); };
    return atomic_file::try_write(dir + "/" + checkpoint_file_name(name.key),
                                  {bytes(header.data(), header.size()), bytes(state_bytes.data(), state_bytes.size()),
                                   bytes(k.data(), half), bytes(v.data(), half)},
                                  atomic_file::Durability::none);
}

BlockFileRead read_checkpoint_file(const std::string& dir, const CheckpointFileName& name,
                                   const CheckpointFileIdentity& id, float* state, uint8_t* k, uint8_t* v) {
    if (!valid(name)) return BlockFileRead::missing;
    const std::string path = dir + "/" + checkpoint_file_name(name.key);
    const Fd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));  // a FIFO: no wait, refused below
    if (!in.valid()) return BlockFileRead::missing;
    struct stat st {};
    if (::fstat(in.get(), &st) != 0) return BlockFileRead::missing;
    const size_t n_partial = name.partial.size();
    if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != id.file_bytes(n_partial))
        return BlockFileRead::rejected;

    Header header{};
    if (!read_all_at(in.get(), header.data(), header.size(), 0)) return BlockFileRead::rejected;
    uint64_t stored_checksum = 0;
    std::memcpy(&stored_checksum, header.data() + kPayloadChecksumAt, 8);
    if (header != make_header(name, id, stored_checksum)) return BlockFileRead::rejected;

    const uint64_t state_bytes = id.state_bytes();
    const uint64_t half = id.tail_bytes(n_partial) / 2;
    auto* state_out = reinterpret_cast<uint8_t*>(state);
    uint64_t at = kCheckpointFileHeaderBytes;
    if (!read_all_at(in.get(), state_out, state_bytes, at)) return BlockFileRead::rejected;
    at += state_bytes;
    if (half > 0 && (!read_all_at(in.get(), k, half, at) || !read_all_at(in.get(), v, half, at + half)))
        return BlockFileRead::rejected;
    if (payload_checksum({state_out, state_bytes}, k, v, half) != stored_checksum) return BlockFileRead::rejected;
    ::futimens(in.get(), nullptr);  // recency for the tier's LRU order, shared with other processes
    return BlockFileRead::ok;
}

}  // namespace kvstash
