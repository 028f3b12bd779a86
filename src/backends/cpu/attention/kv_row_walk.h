// Walking and prefetching one KV head's rows of a block-structured cache, for the grouped-query attention
// kernels of every instruction set (attention_group_avx2.cpp, attention_group_avx512.cpp). Plain code with
// internal linkage: each including ISA file keeps its own copy (no weak symbol: backends/cpu/runtime/scratch.h).
#pragma once

#include <xmmintrin.h>

#include <algorithm>
#include <cstdint>

namespace kvstash::kernels {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including ISA file

// Walks one KV head's rows in key order, block by block, from absolute position `first`: key j's row is
// blocks[j / block_tokens] + (j % block_tokens) * row_bytes + offset.
struct RowCursor {
    const uint8_t* const* blocks;
    uint64_t offset;
    int64_t block_tokens;
    uint64_t row_bytes;
    int64_t block;
    int64_t in_block;

    RowCursor(const uint8_t* const* b, uint64_t off, int64_t bt, uint64_t rb, int64_t first)
        : blocks(b), offset(off), block_tokens(bt), row_bytes(rb), block(first / bt), in_block(first % bt) {}

    const uint8_t* next() {
        const uint8_t* row = blocks[block] + static_cast<uint64_t>(in_block) * row_bytes + offset;
        if (++in_block == block_tokens) {
            in_block = 0;
            ++block;
        }
        return row;
    }
};

// Software prefetch of one head's slice of a row (`bytes` from `row`: head_dim values of the KV type),
// every 64-byte line it touches. The slices of one KV head are 1/n_head_kv of each row, strided by
// row_bytes, in 32-token blocks scattered over the pool: the hardware prefetchers alone leave decode far below
// the machine's read bandwidth (docs/benchmarks-history.md, "Where long-context decode time goes").
inline void prefetch_slice(const uint8_t* row, uint64_t bytes) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63};
    const uintptr_t end = reinterpret_cast<uintptr_t>(row) + bytes;
    for (uintptr_t line = first; line < end; line += 64) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
}

// K rows are prefetched this many keys ahead of the score tile being computed (2 AVX2 tiles: ~32 lines of f16
// at head_dim 64 in flight: at a few GB/s per core of DRAM bandwidth that covers a DRAM read's latency, and
// more would only evict lines still to be used); each tile's V rows are prefetched alongside its scores, so
// that they are in cache for the values pass.
inline constexpr int64_t kPrefetchKeys = 16;

// The K rows of a chunk's score tiles in key order from `first` (n_keys of them), with the prefetches above: for a
// tile of keys [j0, j0 + n), K rows up to kPrefetchKeys keys past it and the tile's own V rows (for the values pass).
struct ScoreTileWalk {
    RowCursor k, k_ahead, v_ahead;
    uint64_t slice_bytes;
    int64_t n_keys;
    int64_t k_prefetched = 0;

    ScoreTileWalk(const uint8_t* const* k_blocks, const uint8_t* const* v_blocks, uint64_t offset, int64_t block_tokens,
                  uint64_t row_bytes, int64_t first, int64_t keys, uint64_t bytes)
        : k(k_blocks, offset, block_tokens, row_bytes, first),
          k_ahead(k_blocks, offset, block_tokens, row_bytes, first),
          v_ahead(v_blocks, offset, block_tokens, row_bytes, first),
          slice_bytes(bytes),
          n_keys(keys) {}

    void prefetch_tile(int64_t j0, int n) {
        for (const int64_t until = std::min(n_keys, j0 + n + kPrefetchKeys); k_prefetched < until; ++k_prefetched) {
            prefetch_slice(k_ahead.next(), slice_bytes);
        }
        for (int i = 0; i < n; ++i) prefetch_slice(v_ahead.next(), slice_bytes);
    }
    const uint8_t* next_key_row() { return k.next(); }
};

}  // namespace
}  // namespace kvstash::kernels
