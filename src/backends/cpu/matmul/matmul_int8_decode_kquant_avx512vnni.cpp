// AVX-512 VNNI integer-activation matmul, few tokens (decode), the K-quants (q4_K, q5_K, q6_K): bitwise
// equal to the scalar definition (reference/matmul_int8_ref.cpp); the scheme in
// matmul_int8_decode_avx512vnni.h.
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include <algorithm>
#include <vector>

#include "backends/cpu/matmul/matmul_int8_decode_avx512vnni.h"

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

// float(65536·hi + lo) per lane, the sum formed exactly in int64.
inline __m512 combine_split(__m512i hi, __m512i lo) {
    const __m512i a = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(hi)), 16),
                                       _mm512_cvtepi32_epi64(_mm512_castsi512_si256(lo)));
    const __m512i b = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(hi, 1)), 16),
                                       _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(lo, 1)));
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtepi64_ps(a)), _mm512_cvtepi64_ps(b), 1);
}

// Weight vector g (0..3) is the low (g even) or high nibbles of quant bytes 64·(g/2) .. +63, one 512-bit
// load: sub-blocks first(g) (bytes 0-31) and first(g) + 2 (bytes 32-63). The activations are rearranged
// to that order once per call instead of the weights once per row.
constexpr int first_sub(int g) { return 4 * (g / 2) + g % 2; }

// vpshufb controls for the scale pairs, from a row's 8 scale bytes broadcast to every 64-bit lane:
// bytes 0 and 3 of dword k take scale first(g) (k < 8) or first(g) + 2 (k >= 8), the others are zeroed.
struct ScalePairControl {
    uint8_t idx[4][64] = {};
    constexpr ScalePairControl() {
        for (int g = 0; g < 4; ++g)
            for (int k = 0; k < 16; ++k) {
                const auto s = static_cast<uint8_t>(first_sub(g) + (k < 8 ? 0 : 2));
                idx[g][4 * k] = idx[g][4 * k + 3] = s;
                idx[g][4 * k + 1] = idx[g][4 * k + 2] = 0x80;
            }
    }
};
alignas(64) constexpr ScalePairControl kScalePair;

struct alignas(64) Vec64 {
    uint8_t b[64];
};

// The activations of a q4_K / q5_K product as decode_tile_q45_k reads them, per super-block b and token j: the
// planes h' (4 vectors), l' (4 vectors) in the weight vectors' sub-block order, then the mins' word
// pairs (l32_s, h32_s), s = 0..7. Prepared once per call rather than once per row tile.
constexpr int kQ45KActVectors = 9;
template <int NT>
void arrange_q45_k_activations(const QuantizedActivations& xa, std::vector<Vec64>& out) {
    const int64_t n_blocks = xa.cols / 256;
    out.resize(static_cast<size_t>(n_blocks * NT * kQ45KActVectors));
    for (int64_t b = 0; b < n_blocks; ++b) {
        for (int j = 0; j < NT; ++j) {
            Vec64* o = out.data() + (b * NT + j) * kQ45KActVectors;
            const auto* ph = reinterpret_cast<const uint8_t*>(xa.h_row(j) + 256 * b);
            const auto* pl = reinterpret_cast<const uint8_t*>(xa.l_row(j) + 256 * b);
            for (int g = 0; g < 4; ++g) {
                const int f = first_sub(g);
                const __m512i h = join(load256(ph + 32 * f), load256(ph + 32 * f + 64));
                const __m512i l = join(load256(pl + 32 * f), load256(pl + 32 * f + 64));
                _mm512_store_si512(
                    o[g].b, _mm512_mask_sub_epi8(h, _mm512_movepi8_mask(l), h, _mm512_set1_epi8(1)));  // h - [l < 0]
                _mm512_store_si512(o[4 + g].b, l);
            }
            const int32_t* h32 = xa.h32_row(j) + 8 * b;
            const int32_t* l32 = xa.l32_row(j) + 8 * b;
            int32_t pairs[16] = {};
            for (int s = 0; s < 8; ++s)
                pairs[s] = static_cast<int32_t>((static_cast<uint32_t>(h32[s]) << 16) |
                                                (static_cast<uint32_t>(l32[s]) & 0xFFFF));
            std::memcpy(o[8].b, pairs, 64);
        }
    }
}

template <TensorType T, int NT>
void decode_tile_q45_k(const uint8_t* w, uint64_t row_bytes, int nr, int64_t cols, const QuantizedActivations& xa,
                       const Vec64* act, float* y, int64_t y_stride) {
    constexpr bool five = T == TensorType::Q5_K;
    constexpr int bytes = five ? 176 : 144;
    // Where per-lane sums stop being summable in int32 (see above): after the D = 2 step (q4_K) or the
    // D = 1 step (q5_K).
    constexpr bool split_early = five;
    const int64_t n_blocks = cols / 256;
    const __m512i low4 = _mm512_set1_epi8(0x0F), low16 = _mm512_set1_epi32(0xFFFF);
    const int64_t ahead = prefetch_distance(row_bytes);
    const bool to_l1 = ahead <= kPrefetchL1Bytes;
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<uint64_t>(std::min(r, nr - 1)) * row_bytes;
    // Transpose of 4 vectors of 4 rows' first 16 bytes (one 128-bit lane per row) into dword k of
    // each row: vpermt2d to rows 0-7 of dwords k, k+1, then 256-bit halves.
    alignas(64) static constexpr int32_t kT01[16] = {0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29};
    alignas(64) static constexpr int32_t kT23[16] = {2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31};
    // Row r's qword: (sc_0..3, sc_4..7) = dword r of sc_lo, then of sc_hi.
    alignas(64) static constexpr int32_t kScaleRows[2][16] = {
        {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23},
        {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}};
    // Min bytes to (m_j, 256·m_j) word pairs (bytes 0 and 3 of each dword, vpshufb inside 128-bit
    // lanes): m_j is byte j % 4 of the row's dword of m_0..3 or m_4..7.
    alignas(64) static constexpr struct MinPair {
        uint32_t idx[4][16] = {};
        constexpr MinPair() {
            for (int s = 0; s < 4; ++s)
                for (int k = 0; k < 16; ++k)
                    idx[s][k] = 0x00808000u | (0x01000001u * static_cast<uint32_t>(4 * (k % 4) + s));
        }
    } kMinPair;
    __m512 acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t off = b * bytes;
        const Vec64* xb = act + b * NT * kQ45KActVectors;
        // Headers of the 16 rows with lane = row: dword 0 (d, dmin), 1-3 (the 12 scale bytes).
        __m512i z[4];
        for (int q = 0; q < 4; ++q) {
            z[q] = _mm512_castsi128_si512(load128(rows[4 * q] + off));
            z[q] = _mm512_inserti32x4(z[q], load128(rows[4 * q + 1] + off), 1);
            z[q] = _mm512_inserti32x4(z[q], load128(rows[4 * q + 2] + off), 2);
            z[q] = _mm512_inserti32x4(z[q], load128(rows[4 * q + 3] + off), 3);
        }
        const __m512i i01 = _mm512_load_si512(kT01), i23 = _mm512_load_si512(kT23);
        const __m512i ta = _mm512_permutex2var_epi32(z[0], i01, z[1]), tb = _mm512_permutex2var_epi32(z[0], i23, z[1]);
        const __m512i tc = _mm512_permutex2var_epi32(z[2], i01, z[3]), td = _mm512_permutex2var_epi32(z[2], i23, z[3]);
        const __m512i head = _mm512_shuffle_i64x2(ta, tc, 0x44), u0 = _mm512_shuffle_i64x2(ta, tc, 0xEE);
        const __m512i u1 = _mm512_shuffle_i64x2(tb, td, 0x44), u2 = _mm512_shuffle_i64x2(tb, td, 0xEE);
        // ggml's unpacking (k_quant_scale_min), 4 bytes per lane: the 32-bit shifts move bits across
        // bytes only into bits the masks clear.
        const __m512i c30 = _mm512_set1_epi8(0x30), l6 = _mm512_set1_epi8(0x3F);
        const __m512i sc_lo = _mm512_and_si512(u0, l6);  // sc_0..3
        const __m512i sc_hi =
            _mm512_ternarylogic_epi32(_mm512_and_si512(u2, low4), _mm512_srli_epi32(u0, 2), c30, 0xF8);  // sc_4..7
        // Each row's 8 scales as one qword (a broadcast load per row, then in-lane vpshufb: cheaper than
        // vpermb from the lane = row vectors).
        alignas(64) int64_t sc_rows[kRows];
        _mm512_store_si512(sc_rows, _mm512_permutex2var_epi32(sc_lo, _mm512_load_si512(kScaleRows[0]), sc_hi));
        _mm512_store_si512(sc_rows + 8, _mm512_permutex2var_epi32(sc_lo, _mm512_load_si512(kScaleRows[1]), sc_hi));
        const __m512i m_lo = _mm512_and_si512(u1, l6);  // m_0..3
        const __m512i m_hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(u2, 4), low4),
                                                       _mm512_srli_epi32(u1, 2), c30, 0xF8);  // m_4..7
        // M_b = sum_j m_j·(256·h32_j + l32_j): per dword m_j·l32_j + 256·m_j·h32_j (int16 operands: m_j,
        // 256·m_j <= 16128, |h32| <= 32 · 127, |l32| <= 32 · 128), |.| <= 63 · 32 · 32639 = 6.6e7, so
        // |M_b| <= 5.3e8: exact in int32 (as the definition's int32 sum).
        __m512i mins[NT];
        for (int j = 0; j < NT; ++j) mins[j] = _mm512_setzero_si512();
        for (int s = 0; s < 8; ++s) {
            const __m512i pair = _mm512_shuffle_epi8(s < 4 ? m_lo : m_hi, _mm512_load_si512(kMinPair.idx[s % 4]));
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
                const uint8_t* qs = blk + (five ? 48 : 16);
                const __m512i q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);
                __m512i wv[4] = {_mm512_and_si512(q0, low4), _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4),
                                 _mm512_and_si512(q1, low4), _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4)};
                if constexpr (five) {
                    // Bit 4 of element l of sub-block s is bit s of qh[l].
                    const __m512i qh = _mm512_broadcast_i64x4(load256(blk + 16));
                    for (int g = 0; g < 4; ++g) {
                        const int f = first_sub(g);
                        const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << f)),
                                                               _mm256_set1_epi8(static_cast<char>(1 << (f + 2))), 1);
                        wv[g] =
                            _mm512_mask_add_epi8(wv[g], _mm512_test_epi8_mask(qh, bit), wv[g], _mm512_set1_epi8(16));
                    }
                }
                const __m512i row_sc = _mm512_set1_epi64(sc_rows[r]);
                __m512i scale[4];
                for (int g = 0; g < 4; ++g) {
                    scale[g] = _mm512_shuffle_epi8(row_sc, _mm512_load_si512(kScalePair.idx[g]));
                }
                for (int j = 0; j < NT; ++j) {
                    __m512i s = _mm512_setzero_si512();
                    for (int g = 0; g < 4; ++g) {
                        const __m512i xh = _mm512_load_si512(xb[j * kQ45KActVectors + g].b);
                        const __m512i xl = _mm512_load_si512(xb[j * kQ45KActVectors + 4 + g].b);
                        const __m512i ph =
                            _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[g], xh), 16);
                        s = _mm512_dpwssd_epi32(s, _mm512_dpbusd_epi32(ph, xl, wv[g]), scale[g]);
                    }
                    v[j][i] = s;
                }
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
        const __m512 d = low_half_fp16(head), dmin = high_half_fp16(head);
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
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30), low16 = _mm512_set1_epi32(0xFFFF);
    // Per 256-bit half (elements k = 0 / 1 of a 64-byte vector, or k = 2 / 3): where qh's bits 2k, 2k+1 go
    // to bits 4, 5 of the weight byte.
    const __m512i qh_up = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i qh_down = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const int64_t ahead = prefetch_distance(row_bytes);
    const bool to_l1 = ahead <= kPrefetchL1Bytes;
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<uint64_t>(std::min(r, nr - 1)) * row_bytes;
    __m512 acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t off = b * bytes;
        __m512i oh[NT], ol[NT];  // (16 · sum16_j) in both words of lane j
        for (int j = 0; j < NT; ++j) {
            const __m512i h16 = _mm512_slli_epi32(_mm512_loadu_si512(xa.h16_row(j) + 16 * b), 4);
            const __m512i l16 = _mm512_slli_epi32(_mm512_loadu_si512(xa.l16_row(j) + 16 * b), 4);
            oh[j] = _mm512_ternarylogic_epi32(h16, _mm512_slli_epi32(h16, 16), low16, 0xEC);  // (a & c) | b
            ol[j] = _mm512_ternarylogic_epi32(l16, _mm512_slli_epi32(l16, 16), low16, 0xEC);
        }
        __m512i part[NT][4];
        for (int q = 0; q < 4; ++q) {
            __m512i v[NT][4];
            for (int i = 0; i < 4; ++i) {
                const uint8_t* blk = rows[4 * q + i] + off;
                for (int l = 0; l < bytes; l += 64) prefetch(blk + ahead + l, to_l1);
                const __m512i sc = _mm512_cvtepi8_epi32(load128(blk + 192));
                const __m512i scw = _mm512_and_si512(sc, low16);  // sc_j as int16, zero high word
                const __m512i nsc = _mm512_sub_epi32(_mm512_setzero_si512(), sc);
                const __m512i nsc2 =
                    _mm512_ternarylogic_epi32(nsc, _mm512_slli_epi32(nsc, 16), low16, 0xEC);  // (-sc_j, -sc_j)
                __m512i wv[4];
                for (int h = 0; h < 2; ++h) {
                    // 64 quant bytes: elements 128h + 0..63 from the low nibbles, + 64..127 from the high.
                    const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
                    const __m512i qh = _mm512_broadcast_i64x4(load256(blk + 128 + 32 * h));
                    wv[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, low4), _mm512_sllv_epi16(qh, qh_up),
                                                          bits45, 0xF8);
                    wv[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                                              _mm512_srlv_epi16(qh, qh_down), bits45, 0xF8);
                }
                __m512i scale_of[4];
                for (int g = 0; g < 4; ++g) {
                    scale_of[g] = _mm512_permutexvar_epi32(
                        _mm512_add_epi32(_mm512_set1_epi32(4 * g),
                                         _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)),
                        scw);
                }
                for (int j = 0; j < NT; ++j) {
                    const int8_t* ph = xa.h_row(j) + 256 * b;
                    const int8_t* pl = xa.l_row(j) + 256 * b;
                    __m512i s_h = _mm512_dpwssd_epi32(_mm512_setzero_si512(), nsc2, oh[j]);
                    __m512i s_l = _mm512_dpwssd_epi32(_mm512_setzero_si512(), nsc2, ol[j]);
                    for (int g = 0; g < 4; ++g) {
                        s_h = _mm512_dpwssd_epi32(
                            s_h, _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[g], _mm512_loadu_si512(ph + 64 * g)),
                            scale_of[g]);
                        s_l = _mm512_dpwssd_epi32(
                            s_l, _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[g], _mm512_loadu_si512(pl + 64 * g)),
                            scale_of[g]);
                    }
                    // Lanes 0-7: S_h partials, 8-15: S_l partials.
                    v[j][i] = _mm512_add_epi32(_mm512_mask_blend_epi32(0xFF00, s_h, s_l),
                                               _mm512_shuffle_i64x2(s_h, s_l, _MM_SHUFFLE(1, 0, 3, 2)));
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
    if (a.type == TensorType::Q4_K || a.type == TensorType::Q5_K) arrange_q45_k_activations<NT>(*a.xq, act);
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
