// The process-wide allocator behind KV block memory (KvBlockBuffer).
//
// Why: a restore copies a state file into freshly allocated KV blocks, and with malloc'd, zero-filled
// std::vectors most of its time went to first-touch 4 KiB page faults, not to the copy (~18 of 23 ms for
// a 46 MB file). This pool
//   - never zero-fills (block rows are written before they are read; see KvCache),
//   - carves blocks out of 2 MiB-aligned chunks advised MADV_HUGEPAGE and pre-faulted in one call
//     (MADV_POPULATE_WRITE): one 2 MiB page fault instead of 512 small ones,
//   - keeps released blocks on a per-size free list, so that the next restore, grow() or copy-on-write
//     reuses memory that is already mapped.
// Memory is returned: once more than retained_limit() bytes sit on the free lists, chunks whose blocks
// are all free are unmapped. Free blocks in chunks that still hold a live block cannot be returned
// (at most one chunk's worth, ~4 MiB, per chunk in use). Thread-safe: blocks are released from any
// thread (States are destroyed on server threads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace kvstash {

class KvBlockPool {
public:
    static KvBlockPool& instance();  // never destroyed: blocks may be released during static destruction

    // `bytes` (> 0) of uninitialised memory, 64-byte aligned (4 KiB aligned within its chunk).
    uint8_t* allocate(size_t bytes);
    // Gives back what allocate(bytes) returned, with the same `bytes`.
    void release(uint8_t* p, size_t bytes) noexcept;

    // Bytes of free blocks kept mapped for reuse before empty chunks are unmapped. Default 256 MiB, or
    // KVSTASH_KV_POOL_RETAIN_MB from the environment at first use. Lowering it trims at once.
    void set_retained_limit(uint64_t bytes);
    uint64_t retained_limit() const;
    // Unmaps every chunk whose blocks are all free (whatever the retained limit).
    void trim();

    struct Stats {
        uint64_t mapped_bytes = 0;  // chunks currently mapped
        uint64_t live_bytes = 0;    // handed out and not yet released (block sizes)
        uint64_t free_bytes = 0;    // on the free lists
        uint64_t chunks = 0;
        uint64_t chunks_mapped_total = 0;  // chunks ever mapped: stays put when blocks are reused
    };
    Stats stats() const;

    // How a block size is laid out in chunks (exposed for tests).
    struct Geometry {
        size_t chunk_bytes = 0;
        uint32_t slots = 0;  // blocks per chunk
        bool huge = false;   // chunk is 2 MiB-aligned and advised MADV_HUGEPAGE
    };
    static Geometry geometry(size_t bytes);

private:
    KvBlockPool();
    struct Chunk {
        uint8_t* base = nullptr;
        size_t bytes = 0;  // mapped length
        size_t slot_bytes = 0;
        uint32_t live = 0;  // slots handed out
    };
    struct FreeList {
        std::vector<uint8_t*> slots;
    };
    void trim_locked(uint64_t keep_free_bytes);  // mu_ held
    static Chunk map_chunk(size_t slot_bytes, const Geometry& g);

    mutable std::mutex mu_;
    std::map<size_t, FreeList> free_;    // by slot size
    std::map<uintptr_t, Chunk> chunks_;  // by base address
    uint64_t retained_limit_ = 0;
    uint64_t empty_chunks_ = 0;  // chunks with no live block (the only ones trim can unmap)
    Stats stats_;
};

}  // namespace kvstash
