// The one path by which KV block bytes leave or enter block memory for anything but the forward pass:
// state-file writer and reader, the prefix cache's disk and Redis tiers (and the checksums of their
// block files), Python export. Block memory may be a device's (kv/kv_block_allocator.h): in host memory
// a read is a view of the block's own bytes and a write fills them in place (no copy: restores stay
// as fast as a memcpy from the file); in device memory the bytes pass through a host buffer of this
// object (one per half: a K and a V half can be staged at once).
//
//   KvBlockStaging staging;
//   std::span<const uint8_t> k = staging.read(kv.block(b), KvHalf::keys);    // host bytes, whole half
//   std::span<uint8_t> dst = staging.write(kv.writable_block(b), KvHalf::values);
//   ... fill dst ...;  staging.commit();                                        // now in the block
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_cache.h"

namespace kvstash {

class KvBlockStaging {
public:
    KvBlockStaging() = default;
    KvBlockStaging(const KvBlockStaging&) = delete;
    KvBlockStaging& operator=(const KvBlockStaging&) = delete;
    ~KvBlockStaging() = default;  // an uncommitted write is dropped

    // Host bytes of one half of `block` (all of it); valid until the next call on this object for the
    // same half, or the block's next write.
    std::span<const uint8_t> read(const KvBlock& block, KvHalf half);
    // Host bytes that become one half of `block` (all of it) at commit(); their contents before the
    // caller fills them are unspecified. A half's previous write must have been committed.
    std::span<uint8_t> write(KvBlock& block, KvHalf half);
    // Every pending write reaches its block.
    void commit();

private:
    std::vector<uint8_t> host_[2];  // device memory only: the staged K and V halves
    KvBlockBuffer* pending_[2] = {nullptr, nullptr};
};

}  // namespace kvstash
