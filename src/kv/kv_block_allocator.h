// Where KV block memory comes from: host memory for the CPU backend (KvBlockPool behind host_kv_allocator()), device
// memory for a device backend. KvBlockBuffer allocates through one of these and keeps it, so that a
// block's copies (copy-on-write, trimming) and its transfers to and from the host stay in its memory.
//
// Nothing but the forward pass's ops (model/backend.h, on the backend whose memory it is) and
// KvBlockStaging (kv/kv_block_staging.h, for everything else: state files, the prefix cache's tiers and
// their checksums, Python export) touches the bytes of a block.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvstash {

enum class MemorySpace { host, device };

class KvBlockAllocator {
public:
    virtual ~KvBlockAllocator() = default;

    virtual MemorySpace space() const = 0;
    // `bytes` (> 0) of uninitialised memory, 64-byte aligned; never null (throws on failure).
    virtual uint8_t* allocate(size_t bytes) = 0;
    // Gives back what allocate(bytes) returned, with the same `bytes`.
    virtual void release(uint8_t* p, size_t bytes) noexcept = 0;
    // n bytes from src to dst, both of this allocator's memory.
    virtual void copy(uint8_t* dst, const uint8_t* src, size_t n) = 0;
    // n bytes between this allocator's memory and host memory.
    virtual void to_host(uint8_t* host, const uint8_t* src, size_t n) = 0;
    virtual void from_host(uint8_t* dst, const uint8_t* host, size_t n) = 0;
};

// The process's host allocator: KvBlockPool (pooled, huge-page backed, never zero-filled).
KvBlockAllocator& host_kv_allocator();

// The allocator a KvCache takes when not given one: host_kv_allocator() until the process chooses a device
// backend (engine/device.h: --device cuda), whose caches must live in its memory. Set before any State exists.
KvBlockAllocator& default_kv_allocator();
void set_default_kv_allocator(KvBlockAllocator& allocator);

}  // namespace kvstash
