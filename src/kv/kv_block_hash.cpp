#include "kv/kv_block_hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's size, for a state held in place
#include <xxhash.h>

#include "backends/cpu/runtime/dispatch.h"
#include "kvstash/error.h"

namespace kvstash {

static_assert(sizeof(XXH3_state_t) <= KvBlockHash::kStateBytes,
              "KvBlockHash::kStateBytes is too small for XXH3_state_t");
static_assert(alignof(XXH3_state_t) <= 64, "XXH3_state_t needs more than 64-byte alignment");

bool KvBlockHash::cpu_has_avx512() {
    return cpu_features().avx512f;  // xxHash's AVX-512 path needs AVX-512F only
}

KvBlockHash::KvBlockHash(Path path) {
    // automatic follows the dispatch module (CPU + KVSTASH_ISA), as every kernel does; the explicit paths
    // are test overrides. Both paths compute the same XXH3 values.
    avx512_ = path == Path::avx512 || (path == Path::automatic && active_isa() == Isa::avx512);
    if (avx512_ && !cpu_has_avx512()) throw Error(ErrorCode::invalid_argument, "KvBlockHash: this CPU has no AVX-512F");
#if KVSTASH_HAVE_X86_KERNELS
    if (avx512_) {
        if (kv_block_hash_avx512::state_bytes() > kStateBytes)
            throw Error(ErrorCode::internal, "KvBlockHash: XXH3 state too large");
        kv_block_hash_avx512::reset(state_);
        return;
    }
#endif
    if (XXH3_64bits_reset(reinterpret_cast<XXH3_state_t*>(state_)) == XXH_ERROR) {
        throw Error(ErrorCode::internal, "cannot initialise XXH3");
    }
}

void KvBlockHash::update(const uint8_t* bytes, size_t n) {
#if KVSTASH_HAVE_X86_KERNELS
    if (avx512_) {
        kv_block_hash_avx512::update(state_, bytes, n);
        return;
    }
#endif
    XXH3_64bits_update(reinterpret_cast<XXH3_state_t*>(state_), bytes, n);
}

uint64_t KvBlockHash::digest() const {
#if KVSTASH_HAVE_X86_KERNELS
    if (avx512_) return kv_block_hash_avx512::digest(state_);
#endif
    return XXH3_64bits_digest(reinterpret_cast<const XXH3_state_t*>(state_));
}

}  // namespace kvstash
