// XXH3-64 streaming compiled for AVX-512 from xxhash.h itself (XXH_INLINE_ALL, XXH_VECTOR = XXH_AVX512):
// the library's own code, on its AVX-512 path; the values are the same on every path (xxHash's spec).
// Only C code from xxhash.h lives in this file, all of it static, so nothing compiled for AVX-512 can be
// picked by the linker for callers on other CPUs. Called only when KvBlockHash saw AVX-512F.
// GCC 12 reports its own _mm512_undefined_epi32() inside avx512fintrin.h as "maybe uninitialized" once
// xxHash's AVX-512 loop is inlined here (a known false positive); the warning is off for this file only.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX512
#include <xxhash.h>

#include "kv/kv_block_hash.h"

namespace kvstash::kv_block_hash_avx512 {

size_t state_bytes() { return sizeof(XXH3_state_t); }
void reset(void* state) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state)); }
void update(void* state, const void* bytes, size_t n) {
    XXH3_64bits_update(static_cast<XXH3_state_t*>(state), bytes, n);
}
uint64_t digest(const void* state) { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state)); }

}  // namespace kvstash::kv_block_hash_avx512
