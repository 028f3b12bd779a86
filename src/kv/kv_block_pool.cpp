#include "kv/kv_block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "kv/kv_block_allocator.h"
#include "kvstash/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define KVSTASH_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define KVSTASH_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define KVSTASH_POISON(p, n) ((void)(p), (void)(n))
#define KVSTASH_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and the pages fault on first use
#endif

namespace kvstash {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;
constexpr size_t kSlotAlign = 64;     // a cache line: blocks never share one
constexpr uint32_t kSmallSlots = 16;  // blocks per chunk when 16 of them fit in less than a huge page
constexpr size_t kMaxHugeChunk = size_t{32} << 20;
constexpr uint64_t kDefaultRetainBytes = uint64_t{256} << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t stride_of(size_t bytes) { return round_up(bytes, kSlotAlign); }

uint64_t default_retained_limit() {
    if (const char* env = std::getenv("KVSTASH_KV_POOL_RETAIN_MB")) {
        char* end = nullptr;
        const unsigned long long mb = std::strtoull(env, &end, 10);
        if (end != env && *end == '\0') return static_cast<uint64_t>(mb) << 20;
    }
    return kDefaultRetainBytes;
}

}  // namespace

KvBlockPool& KvBlockPool::instance() {
    static KvBlockPool* pool = new KvBlockPool();  // intentionally leaked (see the header)
    return *pool;
}

KvBlockPool::KvBlockPool() : retained_limit_(default_retained_limit()) {}

KvBlockPool::Geometry KvBlockPool::geometry(size_t bytes) {
    const size_t stride = stride_of(bytes);
    Geometry g;
    if (stride * kSmallSlots < kHugePage) {
        // Small blocks (tiny test models): plain pages, no huge page to waste.
        g.chunk_bytes = round_up(stride * kSmallSlots, kPage);
        g.slots = static_cast<uint32_t>(g.chunk_bytes / stride);
        return g;
    }
    // Whole huge pages; the smallest chunk whose unused tail is under 1/16 of it (SmolLM2's 368,640-byte
    // halves: 11 per 4 MiB, 3% unused), else the least wasteful up to kMaxHugeChunk.
    g.huge = true;
    const size_t first = round_up(stride, kHugePage);
    double best_fraction = 2.0;
    for (size_t c = first; c <= std::max(first, kMaxHugeChunk); c += kHugePage) {
        const double fraction = static_cast<double>(c % stride) / static_cast<double>(c);
        if (fraction < best_fraction) {
            best_fraction = fraction;
            g.chunk_bytes = c;
        }
        if (fraction <= 1.0 / 16) break;
    }
    g.slots = static_cast<uint32_t>(g.chunk_bytes / stride);
    return g;
}

KvBlockPool::Chunk KvBlockPool::map_chunk(size_t slot_bytes, const Geometry& g) {
    // Over-map by a huge page and cut the ends off, so that the chunk starts on a 2 MiB boundary.
    const size_t span = g.chunk_bytes + (g.huge ? kHugePage : 0);
    void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();  // as the std::vector blocks did before
    auto* base = static_cast<uint8_t*>(raw);
    if (g.huge) {
        auto* aligned = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(base), kHugePage));
        if (aligned > base) ::munmap(base, static_cast<size_t>(aligned - base));
        const size_t tail = static_cast<size_t>(base + span - (aligned + g.chunk_bytes));
        if (tail > 0) ::munmap(aligned + g.chunk_bytes, tail);
        base = aligned;
        ::madvise(base, g.chunk_bytes, MADV_HUGEPAGE);  // best effort: 4 KiB pages if THP is off
    }
    // Fault the whole chunk in now, in one call: far cheaper than a fault per page inside memcpy.
    ::madvise(base, g.chunk_bytes, MADV_POPULATE_WRITE);
    KVSTASH_POISON(base, g.chunk_bytes);
    return Chunk{base, g.chunk_bytes, slot_bytes, 0};
}

uint8_t* KvBlockPool::allocate(size_t bytes) {
    if (bytes == 0) throw Error(ErrorCode::internal, "KvBlockPool::allocate of 0 bytes");
    {
        std::lock_guard lock(mu_);
        FreeList& list = free_[bytes];
        if (!list.slots.empty()) {
            uint8_t* p = list.slots.back();
            list.slots.pop_back();
            auto it = std::prev(chunks_.upper_bound(reinterpret_cast<uintptr_t>(p)));
            if (it->second.live++ == 0) --empty_chunks_;
            stats_.free_bytes -= bytes;
            stats_.live_bytes += bytes;
            KVSTASH_UNPOISON(p, bytes);
            return p;
        }
    }
    // Map outside the lock (populating a chunk takes ~0.1-1 ms): other threads keep allocating.
    const Geometry g = geometry(bytes);
    Chunk chunk = map_chunk(bytes, g);
    const size_t stride = stride_of(bytes);
    std::lock_guard lock(mu_);
    FreeList& list = free_[bytes];
    // Lowest addresses last, so that they are handed out first (in address order).
    for (uint32_t i = g.slots; i-- > 1;) list.slots.push_back(chunk.base + i * stride);
    chunk.live = 1;
    stats_.mapped_bytes += chunk.bytes;
    stats_.free_bytes += uint64_t{g.slots - 1} * bytes;
    stats_.live_bytes += bytes;
    ++stats_.chunks;
    ++stats_.chunks_mapped_total;
    chunks_.emplace(reinterpret_cast<uintptr_t>(chunk.base), chunk);
    KVSTASH_UNPOISON(chunk.base, bytes);
    return chunk.base;
}

void KvBlockPool::release(uint8_t* p, size_t bytes) noexcept {
    if (p == nullptr) return;
    KVSTASH_POISON(p, bytes);
    std::lock_guard lock(mu_);
    auto it = std::prev(chunks_.upper_bound(reinterpret_cast<uintptr_t>(p)));
    if (--it->second.live == 0) ++empty_chunks_;
    stats_.live_bytes -= bytes;
    stats_.free_bytes += bytes;
    try {
        free_[bytes].slots.push_back(p);
    } catch (...) {
        // No memory for the free list's growth: the slot stays unused until its chunk is unmapped.
        stats_.free_bytes -= bytes;
    }
    // Only when a chunk can be returned: free blocks scattered over chunks in use cannot.
    if (stats_.free_bytes > retained_limit_ && empty_chunks_ > 0) trim_locked(retained_limit_);
}

void KvBlockPool::trim_locked(uint64_t keep_free_bytes) {
    for (auto it = chunks_.begin(); it != chunks_.end() && stats_.free_bytes > keep_free_bytes && empty_chunks_ > 0;) {
        Chunk& c = it->second;
        if (c.live != 0) {
            ++it;
            continue;
        }
        FreeList& list = free_[c.slot_bytes];
        const size_t before = list.slots.size();
        std::erase_if(list.slots, [&](uint8_t* s) { return s >= c.base && s < c.base + c.bytes; });
        stats_.free_bytes -= uint64_t{before - list.slots.size()} * c.slot_bytes;
        stats_.mapped_bytes -= c.bytes;
        --stats_.chunks;
        KVSTASH_UNPOISON(c.base, c.bytes);  // the range may be mapped again by anyone
        ::munmap(c.base, c.bytes);
        --empty_chunks_;
        it = chunks_.erase(it);
    }
}

void KvBlockPool::set_retained_limit(uint64_t bytes) {
    std::lock_guard lock(mu_);
    retained_limit_ = bytes;
    if (stats_.free_bytes > retained_limit_) trim_locked(retained_limit_);
}

uint64_t KvBlockPool::retained_limit() const {
    std::lock_guard lock(mu_);
    return retained_limit_;
}

void KvBlockPool::trim() {
    std::lock_guard lock(mu_);
    trim_locked(0);
}

KvBlockPool::Stats KvBlockPool::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

}  // namespace kvstash

namespace kvstash {
namespace {

class HostKvAllocator final : public KvBlockAllocator {
public:
    MemorySpace space() const override { return MemorySpace::host; }
    uint8_t* allocate(size_t bytes) override { return KvBlockPool::instance().allocate(bytes); }
    void release(uint8_t* p, size_t bytes) noexcept override { KvBlockPool::instance().release(p, bytes); }
    void copy(uint8_t* dst, const uint8_t* src, size_t n) override { std::memcpy(dst, src, n); }
    void to_host(uint8_t* host, const uint8_t* src, size_t n) override { std::memcpy(host, src, n); }
    void from_host(uint8_t* dst, const uint8_t* host, size_t n) override { std::memcpy(dst, host, n); }
};

}  // namespace

KvBlockAllocator& host_kv_allocator() {
    static HostKvAllocator* allocator = new HostKvAllocator();  // never destroyed, as the pool
    return *allocator;
}

}  // namespace kvstash
