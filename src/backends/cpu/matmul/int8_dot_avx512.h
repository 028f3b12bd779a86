// The dot-product primitive of the 512-bit integer-activation kernels, chosen at compile time: the tile kernels
// (matmul_int8_avx512_tiles.h, gemm_int8_avx512_tiles.h) are compiled twice, once with it as AVX-512 VNNI
// (*_avx512vnni.cpp) and once as AVX-512 F/BW only (*_avx512.cpp: Skylake-SP/X and other CPUs without VNNI, or
// KVSTASH_ISA=avx512-novnni). Both compute the same exact integers, so the same bits as the scalar definition.
// Include after matmul_int8_avx512vnni.h, from a file compiled for one of those two instruction sets.
#pragma once

#include "backends/cpu/matmul/matmul_int8_avx512vnni.h"

namespace kvstash::kernels {
// File-local in each includer: the VNNI and the F/BW copies must not be merged into one shared (weak) symbol.
namespace {

#if defined(__AVX512VNNI__)
constexpr bool kDotVnni = true;
#else
constexpr bool kDotVnni = false;
#endif

// A run of n steps k = 0 .. n-1, each adding to every int32 lane the 4 products of its 4 unsigned weight bytes w
// (at most kMaxWeight) with 4 signed activation bytes x (|x| <= 128), onto a starting value (an offset correction).
//   VNNI: one vpdpbusd per step.
//   F/BW: vpmaddubsw (two products per int16 lane, saturating at ±32767) summed in int16 over groups of kGroup steps,
//     then widened by vpmaddwd with 1 and added to the int32 lanes. Exact while no int16 sum can pass 32767:
//     kGroup · 2 · kMaxWeight · 128 <= 32767 (4-bit weights: 8 steps, 5-bit: 4, 6-bit: 2). 8-bit weights (q8_0
//     stored as q + 128, up to 255) would saturate a single vpmaddubsw: the F/BW path multiplies q8_0 as int16
//     (gemm_int8_avx512_tiles.h) and not in the 16-row tiles (has_unsigned_tile below).
// An empty asm that the compiler must assume changes v: keeps a chain of integer adds in the order written.
// Without it GCC reassociates the F/BW path's add chains into trees of all the products of a block, which need
// more vector registers than there are (measured: most of the chunk kernels' zmm traffic was spills).
__attribute__((always_inline)) inline void keep_chain(__m512i& v) { asm("" : "+v"(v)); }

template <int kMaxWeight>
struct DotRun {
    __m512i s32;  // the run's int32 sums
#if !defined(__AVX512VNNI__)
    static constexpr int kGroup = 32767 / (2 * 128 * kMaxWeight);
    static_assert(kGroup >= 1, "vpmaddubsw would saturate on these weights");
    __m512i s16;  // the current group's int16 sums
#endif
    __attribute__((always_inline)) void start(__m512i init) {
        s32 = init;
#if !defined(__AVX512VNNI__)
        s16 = _mm512_setzero_si512();
#endif
    }
    // Step k of n (k, n constant after the callers' loops are unrolled, so the group tests fold away).
    __attribute__((always_inline)) void add(int k, int n, __m512i w, __m512i x) {
#if defined(__AVX512VNNI__)
        (void)k;
        (void)n;
        s32 = _mm512_dpbusd_epi32(s32, w, x);
#else
        const __m512i p = _mm512_maddubs_epi16(w, x);
        s16 = k % kGroup == 0 ? p : _mm512_add_epi16(s16, p);
        keep_chain(s16);
        if (k % kGroup == kGroup - 1 || k == n - 1) {
            s32 = _mm512_add_epi32(s32, _mm512_madd_epi16(s16, _mm512_set1_epi16(1)));
            keep_chain(s32);
        }
#endif
    }
    __m512i sum() const { return s32; }
};

// The DotRun parameter for weights up to w: w itself on the F/BW path; one value for all with VNNI, whose vpdpbusd is
// exact for every byte, so that the types that differ only in it (q4_K, q5_K) share one instantiation there.
constexpr int weight_bound(int w) { return kDotVnni ? 255 : w; }

// acc + a[2i]·b[2i] + a[2i+1]·b[2i+1] per int32 lane, int16 inputs whose products and pair sums fit int32 (no
// wrap-around: the callers' values are far below it).
__attribute__((always_inline)) inline __m512i dot_i16(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(acc, a, b);
#else
    __m512i sum = _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
    keep_chain(sum);
    return sum;
#endif
}

// Whether the 16-row unsigned-byte tiles (matmul_int8_avx512_tiles.h) run a type on this instruction set: every type
// they know with VNNI; without it those whose weights fit the exactness bound above (q4_0, q4_1, q4_K, q5_K, q6_K: not
// q8_0).
inline bool has_unsigned_tile(TensorType type) {
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K: return true;
        case TensorType::Q8_0: return kDotVnni;
        default: return false;
    }
}

}  // namespace
}  // namespace kvstash::kernels
