// Shared by the AVX-512 VNNI decode kernels (the integer-activation matmul of one or two tokens):
// matmul_int8_decode_avx512vnni.cpp (32-element blocks: q4_0, q4_1, q8_0, and the entry point) and
// matmul_int8_decode_kquant_avx512vnni.cpp (the K-quants). Include only from files compiled with
// AVX-512 F/BW/VL/DQ + VNNI + VBMI (named *_avx512vnni.cpp).
//
// Natural layout, row sums by a reduction tree.
// For each row the products of a block group (a pair of 32-element blocks, or one K-quant super-block)
// are computed with vpdpbusd on the weights as they lie in the row (no unpacked copy), into a vector V
// whose lanes sum to the row's integers: for 32-element blocks, lanes 0-7 to S of block b and 8-15 to
// S of b+1 (both planes already combined, 256·V_h + V_l, which fits int32 for 32-element blocks); for
// the K-quants see decode_tile_q45_k / decode_tile_q6_k (matmul_int8_decode_kquant_avx512vnni.cpp). The 16 rows'
// vectors are then summed lane-group-wise by pair_step reductions (a shuffle and a blend per step) into vectors with
// lane = row, and the float steps of the definition run on them. The integers are exact, so the result is bitwise that
// of the unpacked path and of the scalar code.
#pragma once

#include <algorithm>

#include "backends/cpu/matmul/matmul_int8_avx512vnni.h"

namespace kvstash::kernels::int8_avx512 {

// Decode streams the weights from memory once. Each row's block is prefetched at the same position of
// the next 16-row tile (the rows of a task form one contiguous stream), at least 16 KiB ahead; into L1
// when that distance fits it, else into L2 (long rows: 16 rows of 5632 q4_K columns are 50 KiB).
constexpr int64_t kPrefetchL1Bytes = 24576;
inline int64_t prefetch_distance(uint64_t row_bytes) {
    return std::max<int64_t>(16384, static_cast<int64_t>(kRows * row_bytes));
}
inline void prefetch(const uint8_t* p, bool to_l1) {
    if (to_l1) {
        _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
    } else {
        _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
    }
}

// One reduction step on vectors a, b whose lanes L and L ^ D belong to the same row: out[L] =
// a[L] + a[L ^ D] where bit D of L is clear, b[L] + b[L ^ D] where it is set. One shuffle each (the
// other addend stays in place, a blend). Steps D = 1, 2, 4, 8 on rows 2i, 2i+1, then on the results
// pairwise, and so on, leave row r's sum in lane r.
template <int D>
__attribute__((always_inline)) inline __m512i pair_step(__m512i a, __m512i b) {
    constexpr __mmask16 m = D == 1 ? 0xAAAA : D == 2 ? 0xCCCC : D == 4 ? 0xF0F0 : 0xFF00;
    __m512i y;  // y[L] = (bit D of L ? b : a)[L ^ D]
    if constexpr (D == 1) {
        y = _mm512_shuffle_epi32(_mm512_mask_blend_epi32(m, b, a), _MM_PERM_CDAB);
    } else if constexpr (D == 2) {
        y = _mm512_alignr_epi8(b, a, 8);
    } else if constexpr (D == 4) {
        const __m512i c = _mm512_mask_blend_epi32(m, b, a);
        y = _mm512_shuffle_i32x4(c, c, _MM_SHUFFLE(2, 3, 0, 1));
    } else {
        y = _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(1, 0, 3, 2));
    }
    return _mm512_add_epi32(_mm512_mask_blend_epi32(m, a, b), y);
}

// v[r] (r < 16): row r's vector. Returns group 0 (lanes 0-7 summed) and group 1 (8-15) with lane = row:
// steps D = 1, 2, 4 on rows 0-7 and on rows 8-15 (sums never cross lane 8), then the halves joined.
__attribute__((always_inline)) inline void reduce_rows(__m512i* v, __m512i& group0, __m512i& group1) {
    __m512i half[2];
    for (int h = 0; h < 2; ++h) {
        const __m512i* x = v + 8 * h;
        const __m512i a = pair_step<1>(x[0], x[1]), b = pair_step<1>(x[2], x[3]);
        const __m512i c = pair_step<1>(x[4], x[5]), d = pair_step<1>(x[6], x[7]);
        half[h] = pair_step<4>(pair_step<2>(a, b), pair_step<2>(c, d));
    }
    group0 = _mm512_shuffle_i64x2(half[0], half[1], _MM_SHUFFLE(1, 0, 1, 0));
    group1 = _mm512_shuffle_i64x2(half[0], half[1], _MM_SHUFFLE(3, 2, 3, 2));
}

// The first dword of block b of each of the 16 rows (plus `offset` bytes): rows >= nr read nothing.
inline __m512i gather_rows(const uint8_t* base, uint64_t row_bytes, int nr, int64_t offset) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(static_cast<int>(row_bytes)));
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), static_cast<__mmask16>((1u << nr) - 1), idx,
                                       base + offset, 1);
}
inline __m512 low_half_fp16(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
inline __m512 high_half_fp16(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))); }

// Rows [row_begin, row_end) of a one- or two-token product (a.n_tokens), a 16-row tile at a time:
// 32-element block types (q4_0, q4_1, q8_0) and the K-quants (q4_K, q5_K, q6_K).
void decode_rows_blocks32(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
void decode_rows_super_blocks(const MatmulArgs& a, int64_t row_begin, int64_t row_end);

}  // namespace kvstash::kernels::int8_avx512
