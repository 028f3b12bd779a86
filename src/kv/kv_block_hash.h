// XXH3-64 over a stream of bytes, for checking the 'kv' section of a state file as it is copied into
// KV blocks. The same values as libxxhash's XXH3_64bits (the state file checksum), computed on xxHash's
// own AVX-512 path when the CPU has it: on a block half in L2 (368,640 B for SmolLM2) that path runs at
// ~54 GB/s against ~16-20 GB/s for the SSE2 code in the Debian libxxhash, which made the checksum the
// largest part of a load.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvstash {

class KvBlockHash {
public:
    enum class Path { automatic, portable, avx512 };
    // `automatic`: AVX-512 when the dispatch module's active_isa() is avx512 (so KVSTASH_ISA=avx2 or scalar
    // selects the portable path). `avx512` on a CPU without AVX-512F throws Error(invalid_argument).
    explicit KvBlockHash(Path path = Path::automatic);
    KvBlockHash(const KvBlockHash&) = delete;
    KvBlockHash& operator=(const KvBlockHash&) = delete;

    void update(const uint8_t* bytes, size_t n);
    uint64_t digest() const;
    bool uses_avx512() const { return avx512_; }
    static bool cpu_has_avx512();

    static constexpr size_t kStateBytes = 640;  // >= sizeof(XXH3_state_t) (576 in xxHash 0.8), checked

private:
    alignas(64) unsigned char state_[kStateBytes];
    bool avx512_ = false;
};

// The AVX-512 path (kv_block_hash_avx512.cpp, compiled with -mavx512f); `state` is an XXH3_state_t.
namespace kv_block_hash_avx512 {
size_t state_bytes();
void reset(void* state);
void update(void* state, const void* bytes, size_t n);
uint64_t digest(const void* state);
}  // namespace kv_block_hash_avx512

}  // namespace kvstash
