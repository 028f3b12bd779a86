// KvBlockHash gives libxxhash's XXH3_64bits (the state file checksum) on every path it can take, however
// the bytes are split into update() calls: the portable path (libxxhash) and xxHash's AVX-512 path
// (compiled from xxhash.h) are checked against one-shot XXH3_64bits of the linked library.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backends/cpu/runtime/dispatch.h"
#include "kv/kv_block_hash.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

std::vector<KvBlockHash::Path> paths() {
    std::vector<KvBlockHash::Path> p{KvBlockHash::Path::portable, KvBlockHash::Path::automatic};
    if (KvBlockHash::cpu_has_avx512()) p.push_back(KvBlockHash::Path::avx512);
    return p;
}

TEST(KvBlockHash, EmptyInputIsXxh3OfNothing) {
    // XXH3_64bits("", 0) with seed 0 = 0x2D06800538D394C2 (xxHash's published sanity value).
    for (const KvBlockHash::Path path : paths()) {
        KvBlockHash h(path);
        EXPECT_EQ(h.digest(), 0x2D06800538D394C2ull) << static_cast<int>(path);
    }
}

TEST(KvBlockHash, StreamingEqualsOneShotXxh3OnEveryPath) {
    std::mt19937_64 rng(7);
    // Lengths around XXH3's internal thresholds (16, 128, 240 bytes; 1 KiB stripes; 256-byte buffer) and
    // a SmolLM2 block half (368,640 B) plus a bit.
    const size_t lengths[] = {1, 15, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 4096, 100003, 368640 + 777};
    for (const size_t n : lengths) {
        std::vector<uint8_t> bytes(n);
        for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
        const uint64_t expected = XXH3_64bits(bytes.data(), n);
        for (const KvBlockHash::Path path : paths()) {
            for (const size_t piece : {n, size_t{1}, size_t{7}, size_t{256}, size_t{65536}}) {
                KvBlockHash h(path);
                for (size_t at = 0; at < n; at += piece) h.update(bytes.data() + at, std::min(piece, n - at));
                ASSERT_EQ(h.digest(), expected)
                    << "length " << n << " piece " << piece << " path " << static_cast<int>(path);
            }
        }
    }
}

TEST(KvBlockHash, AutomaticFollowsTheActiveIsaAndAvx512IsRefusedWithoutIt) {
    // automatic follows the dispatch module (CPU + KVSTASH_ISA), as every kernel does.
    EXPECT_EQ(KvBlockHash().uses_avx512(), active_isa() == Isa::avx512);
    EXPECT_FALSE(KvBlockHash(KvBlockHash::Path::portable).uses_avx512());
    if (!KvBlockHash::cpu_has_avx512()) {
        EXPECT_THROW(KvBlockHash(KvBlockHash::Path::avx512), Error);
    }
}

}  // namespace
}  // namespace kvstash
