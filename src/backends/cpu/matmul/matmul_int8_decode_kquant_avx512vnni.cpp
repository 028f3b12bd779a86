// AVX-512 VNNI integer-activation matmul, few tokens (decode), the K-quants (q4_K, q5_K, q6_K): bitwise
// equal to the scalar definition (reference/matmul_int8_ref.cpp); the scheme in
// matmul_int8_decode_avx512vnni.h.
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include <algorithm>
#include <vector>

#include "backends/cpu/matmul/matmul_int8_kquant_avx512vnni.h"

namespace kvstash::kernels::int8_avx512 {
namespace {

// ---- q4_K / q5_K: packed planes, rows reduced by lane-pair steps, mins in lane = row ----
// Per row and weight vector g the two planes' products go into one vector of int16 pairs. The planes
// are re-split (once per call) as q = 256·h' + l' with l' = q mod 256 in [0, 255] (the bytes of l read as
// unsigned) and h' = h - [l < 0] in [-128, 127]. P_h = vpdpbusd(0, w, h') is shifted left 16 bits, then
// vpdpbusd(·, l', w) (l' the unsigned operand, the weights <= 31 the signed one) adds P_l >= 0, so each
// dword is 65536·P_h + P_l with 0 <= P_l <= 4 · 31 · 255 = 31620 < 2^15 and |P_h| <= 4 · 31 · 128: its
// signed words are exactly (P_l, P_h) (a negative P_l would borrow from the high word). One vpdpwssd
// with the scale pair (sc, 256·sc) (256 · 63 = 16128 fits int16) adds sc·(256·P_h + P_l) = sc·sum w·q.
// So one vpdpwssd per vector instead of one per plane, and one vector per row to reduce. A lane sums
// 16 elements (4 per vector), so |lane| <= 16 · 63 · wmax · 32639: q4_K 4.94e8, q5_K 1.02e9. Lanes are
// summed in int32 while exact (q4_K: 4 lanes, 1.97e9; q5_K: 2 lanes, 2.04e9; < 2^31 - 1 = 2.147e9),
// then split as 65536·hi + lo (hi = v >> 16 arithmetic, lo = v & 0xFFFF) and the rest summed per part;
// S_b is formed from the two sums in int64: the same integer as the definition's (the test
// ExtremeIntegerSumsBitwise reaches these bounds). The mins' sums M_b are vpdpwssd products of
// (m_j, 256·m_j) with (l32_j, h32_j), lanes = rows from the start: no per-row work and no tree.

template <TensorType T, int NT>
void decode_tile_q45_k(const uint8_t* w, uint64_t row_bytes, int nr, int64_t cols, const QuantizedActivations& xa,
                       const Vec64* act, float* y, int64_t y_stride) {
    constexpr bool five = T == TensorType::Q5_K;
    constexpr int bytes = five ? 176 : 144;
    // Where per-lane sums stop being summable in int32 (see above): after the D = 2 step (q4_K) or the
    // D = 1 step (q5_K).
    constexpr bool split_early = five;
    const int64_t n_blocks = cols / 256;
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    const int64_t ahead = prefetch_distance(row_bytes);
    const bool to_l1 = ahead <= kPrefetchL1Bytes;
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<uint64_t>(std::min(r, nr - 1)) * row_bytes;
    __m512 acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t off = b * bytes;
        const Vec64* xb = act + b * NT * kQ45KActVectors;
        Q45KHeaders hdr;
        load_q45_k_headers(rows, off, hdr);
        // M_b = sum_j m_j·(256·h32_j + l32_j): per dword m_j·l32_j + 256·m_j·h32_j (int16 operands: m_j,
        // 256·m_j <= 16128, |h32| <= 32 · 127, |l32| <= 32 · 128), |.| <= 63 · 32 · 32639 = 6.6e7, so
        // |M_b| <= 5.3e8: exact in int32 (as the definition's int32 sum).
        __m512i mins[NT];
        for (int j = 0; j < NT; ++j) mins[j] = _mm512_setzero_si512();
        for (int s = 0; s < 8; ++s) {
            const __m512i pair = min_pairs(hdr, s);
            for (int j = 0; j < NT; ++j) {
                const int32_t x_pair = load_i32(xb[j * kQ45KActVectors + 8].b + 4 * s);
                mins[j] = _mm512_dpwssd_epi32(mins[j], pair, _mm512_set1_epi32(x_pair));
            }
        }
        // Rows in groups of 4 (steps D = 1, 2 inside a group, 4 and 8 across groups), per token.
        __m512i part_hi[NT][4], part_lo[NT][4];
        for (int q = 0; q < 4; ++q) {
            __m512i v[NT][4];
            for (int i = 0; i < 4; ++i) {
                const int r = 4 * q + i;
                const uint8_t* blk = rows[r] + off;
                for (int l = 0; l < bytes; l += 64) prefetch(blk + ahead + l, to_l1);
                __m512i wv[4], scale[4];
                q45_k_weight_vectors<five>(blk, wv);
                q45_k_scale_pairs(hdr.sc_rows[r], scale);
                for (int j = 0; j < NT; ++j) v[j][i] = q45_k_row_products(wv, scale, xb + j * kQ45KActVectors);
            }
            for (int j = 0; j < NT; ++j) {
                const __m512i a = pair_step<1>(v[j][0], v[j][1]), c = pair_step<1>(v[j][2], v[j][3]);
                if constexpr (split_early) {
                    part_hi[j][q] = pair_step<2>(_mm512_srai_epi32(a, 16), _mm512_srai_epi32(c, 16));
                    part_lo[j][q] = pair_step<2>(_mm512_and_si512(a, low16), _mm512_and_si512(c, low16));
                } else {
                    const __m512i e = pair_step<2>(a, c);
                    part_hi[j][q] = _mm512_srai_epi32(e, 16);
                    part_lo[j][q] = _mm512_and_si512(e, low16);
                }
            }
        }
        const __m512 d = low_half_fp16(hdr.head), dmin = high_half_fp16(hdr.head);
        for (int j = 0; j < NT; ++j) {
            const __m512i hi =
                pair_step<8>(pair_step<4>(part_hi[j][0], part_hi[j][1]), pair_step<4>(part_hi[j][2], part_hi[j][3]));
            const __m512i lo =
                pair_step<8>(pair_step<4>(part_lo[j][0], part_lo[j][1]), pair_step<4>(part_lo[j][2], part_lo[j][3]));
            const __m512 x_scale = _mm512_set1_ps(xa.d_row(j)[b]);
            acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, x_scale), combine_split(hi, lo), acc[j]);
            acc[j] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, x_scale), _mm512_cvtepi32_ps(mins[j]), acc[j]);
        }
    }
    const auto mask = static_cast<__mmask16>((1u << nr) - 1);
    for (int j = 0; j < NT; ++j) _mm512_mask_storeu_ps(y + j * y_stride, mask, acc[j]);
}

// ---- q6_K ----
// Each plane's products are summed on their own (weights 0..63 give 4-product sums up to 4 · 63 · 255
// on an unsigned plane, past int16, so the q4_K pairing does not apply): per vector g (sub-blocks
// 4g .. 4g+3, 16 elements = one 128-bit lane each) vpdpbusd, then vpdpwssd with the scale (|4 products|
// <= 4 · 63 · 128 < 2^15). The weights' offset -32 enters as sum_j sc_j · (-32 · sum16_j) per plane: one
// vpdpwssd of the word pairs (-sc_j, -sc_j) (|sc| <= 128) and (16 · sum16_j, 16 · sum16_j), which fit
// int16: 16 · h16 in [-32512, 32512], 16 · l16 in [-32768, 32512] (hence -sc, not sc, on the weight side).
// Each plane's sums are exact in int32: the offset term (the accumulator's start) is at most
// 256 · 128 · 32 · 128 = 2^27 in magnitude, the unsigned-weight products add at most 256 · 128 · 63 · 128
// < 2^28, so every partial sum (per lane, and over lanes in the tree) stays below 2^29. Per row the two
// planes are folded into one vector (h in lanes 0-7, l in 8-15), reduced by pair_step, and combined
// into S_b in int64 (combine_planes_wide).
template <int NT>
void decode_tile_q6_k(const uint8_t* w, uint64_t row_bytes, int nr, int64_t cols, const QuantizedActivations& xa,
                      float* y, int64_t y_stride) {
    constexpr int bytes = 210;
    const int64_t n_blocks = cols / 256;
    const int64_t ahead = prefetch_distance(row_bytes);
    const bool to_l1 = ahead <= kPrefetchL1Bytes;
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<uint64_t>(std::min(r, nr - 1)) * row_bytes;
    __m512 acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t off = b * bytes;
        __m512i oh[NT], ol[NT];
        for (int j = 0; j < NT; ++j) {
            oh[j] = q6_k_offset_pairs(xa.h16_row(j) + 16 * b);
            ol[j] = q6_k_offset_pairs(xa.l16_row(j) + 16 * b);
        }
        __m512i part[NT][4];
        for (int q = 0; q < 4; ++q) {
            __m512i v[NT][4];
            for (int i = 0; i < 4; ++i) {
                const uint8_t* blk = rows[4 * q + i] + off;
                for (int l = 0; l < bytes; l += 64) prefetch(blk + ahead + l, to_l1);
                __m512i wv[4], scale_of[4], nsc2;
                q6_k_row_vectors(blk, wv, scale_of, nsc2);
                for (int j = 0; j < NT; ++j) {
                    v[j][i] = q6_k_row_products(wv, scale_of, nsc2, oh[j], ol[j], xa.h_row(j) + 256 * b,
                                                xa.l_row(j) + 256 * b);
                }
            }
            for (int j = 0; j < NT; ++j)
                part[j][q] = pair_step<2>(pair_step<1>(v[j][0], v[j][1]), pair_step<1>(v[j][2], v[j][3]));
        }
        const __m512 d = high_half_fp16(gather_rows(w, row_bytes, nr, off + 206));
        for (int j = 0; j < NT; ++j) {
            // Rows 0-7 (lane = row, plane h in lanes 0-7, l in 8-15) and rows 8-15.
            const __m512i lo8 = pair_step<4>(part[j][0], part[j][1]), hi8 = pair_step<4>(part[j][2], part[j][3]);
            const __m512i s_h = _mm512_shuffle_i64x2(lo8, hi8, _MM_SHUFFLE(1, 0, 1, 0));
            const __m512i s_l = _mm512_shuffle_i64x2(lo8, hi8, _MM_SHUFFLE(3, 2, 3, 2));
            const __m512 x_scale = _mm512_set1_ps(xa.d_row(j)[b]);
            acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, x_scale), combine_planes_wide(s_h, s_l), acc[j]);
        }
    }
    const auto mask = static_cast<__mmask16>((1u << nr) - 1);
    for (int j = 0; j < NT; ++j) _mm512_mask_storeu_ps(y + j * y_stride, mask, acc[j]);
}

template <int NT>
void rows_super_blocks(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    thread_local std::vector<Vec64> act;
    if (a.type == TensorType::Q4_K || a.type == TensorType::Q5_K) arrange_q45_k_activations(*a.xq, NT, act);
    for (int64_t r = row_begin; r < row_end; r += kRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kRows, row_end - r));
        const uint8_t* w = a.W + static_cast<uint64_t>(r) * a.row_bytes;
        if (a.type == TensorType::Q4_K) {
            decode_tile_q45_k<TensorType::Q4_K, NT>(w, a.row_bytes, nr, a.cols, *a.xq, act.data(), a.Y + r, a.y_stride);
        } else if (a.type == TensorType::Q5_K) {
            decode_tile_q45_k<TensorType::Q5_K, NT>(w, a.row_bytes, nr, a.cols, *a.xq, act.data(), a.Y + r, a.y_stride);
        } else {
            decode_tile_q6_k<NT>(w, a.row_bytes, nr, a.cols, *a.xq, a.Y + r, a.y_stride);
        }
    }
}

}  // namespace

void decode_rows_super_blocks(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.n_tokens == 1) {
        rows_super_blocks<1>(a, row_begin, row_end);
    } else {
        rows_super_blocks<2>(a, row_begin, row_end);
    }
}

}  // namespace kvstash::kernels::int8_avx512
