#include "kv/kv_block_staging.h"

#include "kvstash/error.h"

namespace kvstash {
namespace {
size_t index_of(KvHalf half) { return half == KvHalf::keys ? 0 : 1; }
}  // namespace

std::span<const uint8_t> KvBlockStaging::read(const KvBlock& block, KvHalf half) {
    const KvBlockBuffer& buffer = block.half(half);
    if (buffer.allocator().space() == MemorySpace::host) return {buffer.data(), buffer.size()};
    std::vector<uint8_t>& host = host_[index_of(half)];
    host.resize(buffer.size());
    buffer.allocator().to_host(host.data(), buffer.data(), buffer.size());
    return host;
}

std::span<uint8_t> KvBlockStaging::write(KvBlock& block, KvHalf half) {
    KvBlockBuffer& buffer = block.half(half);
    if (buffer.allocator().space() == MemorySpace::host) return {buffer.data(), buffer.size()};
    const size_t i = index_of(half);
    if (pending_[i] != nullptr) {
        throw Error(ErrorCode::internal, "KvBlockStaging::write: the previous write of this half was not committed");
    }
    pending_[i] = &buffer;
    host_[i].resize(buffer.size());
    return host_[i];
}

void KvBlockStaging::commit() {
    // Host memory: nothing pending, the bytes are already in place.
    for (size_t i = 0; i < 2; ++i) {
        if (pending_[i] == nullptr) continue;
        pending_[i]->allocator().from_host(pending_[i]->data(), host_[i].data(), pending_[i]->size());
        pending_[i] = nullptr;
    }
}

}  // namespace kvstash
