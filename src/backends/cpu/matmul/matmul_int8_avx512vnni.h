// Shared by the AVX-512 integer-activation kernels (matmul_int8_avx512_tiles.h, gemm_int8_avx512_tiles.h: many
// tokens; matmul_int8_decode*_avx512vnni.cpp: a few tokens; quantize_act_avx512.cpp). Nothing here needs more than
// AVX-512 F/BW/VL/DQ: include from files compiled with that (*_avx512.cpp) or with VNNI + VBMI besides
// (*_avx512vnni.cpp).
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <cstring>

#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"

namespace kvstash::kernels::int8_avx512 {

constexpr int kRows = 16;  // rows per tile = int32 lanes

inline float fp16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline int32_t load_i32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

inline void store128(uint8_t* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }
inline void store256(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// 4 activation bytes broadcast to every dword (a memory broadcast, foldable into vpdpbusd).
inline __m512i bcast4(const int8_t* p) { return _mm512_broadcastd_epi32(_mm_loadu_si32(p)); }

// float(256·s_h + s_l) per lane, the sum formed exactly in int64 (K-quant super-block sums may pass 2^31).
inline __m512 combine_planes_wide(__m512i s_h, __m512i s_l) {
    const __m512i lo = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(s_h)), 8),
                                        _mm512_cvtepi32_epi64(_mm512_castsi512_si256(s_l)));
    const __m512i hi = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(s_h, 1)), 8),
                                        _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(s_l, 1)));
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtepi64_ps(lo)), _mm512_cvtepi64_ps(hi), 1);
}

constexpr int kFewTokensMax = 2;  // token counts up to this take the decode kernels directly
// Up to few_tokens_max(type) tokens (speculative verification, continuous batching of a few sequences) take
// the few-token kernels (decode_rows, matmul_int8_few_avx512vnni.h: each weight read and unpacked once,
// multiplied per token pair, rows summed by a reduction tree); above, the many-token kernels, which unpack
// and transpose every 16-row tile (here: q4_0, q4_1, q5_K) or 32-row tile (gemm_int8.h: q8_0, q4_K, q6_K)
// and need no tree. Where they cross, measured per type with `kvstash_bench --kernels` (1 thread, CPU time;
// docs/benchmarks.md, "Few-token matmul"): q4_0 / q4_1 between 4 and 6 tokens (the 16-row tiles are cheap to
// build for 32-element blocks), q8_0 at 10 (9 = a verification of 8 guesses), q5_K between 10 and 16, q4_K and
// q6_K past 16.
constexpr int kFewTokensChunkedMax = 16;  // the largest of few_tokens_max(type)
// The threshold of `type`, or KVSTASH_FEW_TOKENS_MAX for every type where set (>= 2; read once): one binary
// measures both sides of the threshold. Every choice gives the same bits.
int64_t few_tokens_max(TensorType type);
// The same where the weights are repacked for the 32-row tiles (repack_tiles.h, gemm_int8.h): those tiles then cost
// no unpacking and transposing per call and win from fewer tokens. Measured like few_tokens_max (docs/benchmarks.md,
// "Weight repacking at load", and for q4_0 / q4_1 "Speculative decoding"): q4_0, q4_1 and q8_0 from 3 tokens, q6_K
// from 8, q4_K from 9. KVSTASH_FEW_TOKENS_MAX, where set, here too.
int64_t few_tokens_max_repacked(TensorType type);

// The decode path (matmul_int8_decode*_avx512vnni.cpp, and the few-token kernels above kFewTokensMax): rows
// [row_begin, row_end), a.n_tokens <= few_tokens_max(a.type).
void decode_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end);

}  // namespace kvstash::kernels::int8_avx512
