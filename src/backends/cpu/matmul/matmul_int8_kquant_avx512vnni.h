// Shared by the AVX-512 VNNI K-quant kernels of the integer-activation matmul (q4_K / q5_K): the decode
// kernels (matmul_int8_decode_kquant_avx512vnni.cpp, one or two tokens) and the few-token kernels
// (matmul_int8_few_kquant_avx512vnni.cpp, which unpack each super-block once for every token). Include only
// from files compiled with AVX-512 F/BW/VL/DQ + VNNI + VBMI (named *_avx512vnni.cpp). Everything has internal
// linkage (an unnamed namespace): each including file keeps its own copy (scripts/check_isa_symbols.sh).
//
// The q4_K / q5_K scheme (the planes packed into int16 pairs per weight vector, rows reduced by lane-pair
// steps, the mins in lane = row) is described in matmul_int8_decode_kquant_avx512vnni.cpp.
#pragma once

#include <vector>

#include "backends/cpu/matmul/matmul_int8_decode_avx512vnni.h"

namespace kvstash::kernels::int8_avx512 {
namespace {

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

// Min bytes to (m_j, 256·m_j) word pairs (bytes 0 and 3 of each dword, vpshufb inside 128-bit lanes): m_j is
// byte j % 4 of the row's dword of m_0..3 or m_4..7.
struct MinPairControl {
    uint32_t idx[4][16] = {};
    constexpr MinPairControl() {
        for (int s = 0; s < 4; ++s)
            for (int k = 0; k < 16; ++k)
                idx[s][k] = 0x00808000u | (0x01000001u * static_cast<uint32_t>(4 * (k % 4) + s));
    }
};
alignas(64) constexpr MinPairControl kMinPair;

struct alignas(64) Vec64 {
    uint8_t b[64];
};

// The activations of a q4_K / q5_K product as the kernels read them, per super-block b and token j
// (of n_tokens): the planes h' (4 vectors), l' (4 vectors) in the weight vectors' sub-block order, then the
// mins' word pairs (l32_s, h32_s), s = 0..7. Prepared once per call rather than once per row tile.
constexpr int kQ45KActVectors = 9;
inline void arrange_q45_k_activations(const QuantizedActivations& xa, int64_t n_tokens, std::vector<Vec64>& out) {
    const int64_t n_blocks = xa.cols / 256;
    out.resize(static_cast<size_t>(n_blocks * n_tokens * kQ45KActVectors));
    for (int64_t b = 0; b < n_blocks; ++b) {
        for (int64_t j = 0; j < n_tokens; ++j) {
            Vec64* o = out.data() + (b * n_tokens + j) * kQ45KActVectors;
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

// The super-block headers of 16 rows (rows[r] + off = row r's super-block), lane = row.
struct Q45KHeaders {
    __m512i head;                        // dword r: row r's fp16 pair (d, dmin)
    alignas(64) int64_t sc_rows[kRows];  // row r's 8 scales sc_0..7, one byte each
    __m512i m_lo, m_hi;                  // dword r: row r's mins m_0..3, m_4..7
};

inline void load_q45_k_headers(const uint8_t* const* rows, int64_t off, Q45KHeaders& out) {
    // Transpose of 4 vectors of 4 rows' first 16 bytes (one 128-bit lane per row) into dword k of
    // each row: vpermt2d to rows 0-7 of dwords k, k+1, then 256-bit halves.
    alignas(64) static constexpr int32_t kT01[16] = {0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29};
    alignas(64) static constexpr int32_t kT23[16] = {2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31};
    // Row r's qword: (sc_0..3, sc_4..7) = dword r of sc_lo, then of sc_hi.
    alignas(64) static constexpr int32_t kScaleRows[2][16] = {
        {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23},
        {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}};
    // Headers with lane = row: dword 0 (d, dmin), 1-3 (the 12 scale bytes).
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
    out.head = _mm512_shuffle_i64x2(ta, tc, 0x44);
    const __m512i u0 = _mm512_shuffle_i64x2(ta, tc, 0xEE);
    const __m512i u1 = _mm512_shuffle_i64x2(tb, td, 0x44), u2 = _mm512_shuffle_i64x2(tb, td, 0xEE);
    // ggml's unpacking (k_quant_scale_min), 4 bytes per lane: the 32-bit shifts move bits across
    // bytes only into bits the masks clear.
    const __m512i low4 = _mm512_set1_epi8(0x0F), c30 = _mm512_set1_epi8(0x30), l6 = _mm512_set1_epi8(0x3F);
    const __m512i sc_lo = _mm512_and_si512(u0, l6);  // sc_0..3
    const __m512i sc_hi =
        _mm512_ternarylogic_epi32(_mm512_and_si512(u2, low4), _mm512_srli_epi32(u0, 2), c30, 0xF8);  // sc_4..7
    // Each row's 8 scales as one qword (a broadcast load per row, then in-lane vpshufb: cheaper than
    // vpermb from the lane = row vectors).
    _mm512_store_si512(out.sc_rows, _mm512_permutex2var_epi32(sc_lo, _mm512_load_si512(kScaleRows[0]), sc_hi));
    _mm512_store_si512(out.sc_rows + 8, _mm512_permutex2var_epi32(sc_lo, _mm512_load_si512(kScaleRows[1]), sc_hi));
    out.m_lo = _mm512_and_si512(u1, l6);  // m_0..3
    out.m_hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(u2, 4), low4), _mm512_srli_epi32(u1, 2),
                                         c30, 0xF8);  // m_4..7
}

// The (m_s, 256·m_s) word pairs of sub-block s (0..7) of the 16 rows, lane = row.
inline __m512i min_pairs(const Q45KHeaders& h, int s) {
    return _mm512_shuffle_epi8(s < 4 ? h.m_lo : h.m_hi, _mm512_load_si512(kMinPair.idx[s % 4]));
}

// The 4 weight vectors of a row's super-block `blk` (unsigned, 0..15 or 0..31) in the order of first_sub.
template <bool kFive>
__attribute__((always_inline)) inline void q45_k_weight_vectors(const uint8_t* blk, __m512i* wv) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const uint8_t* qs = blk + (kFive ? 48 : 16);
    const __m512i q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);
    wv[0] = _mm512_and_si512(q0, low4);
    wv[1] = _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4);
    wv[2] = _mm512_and_si512(q1, low4);
    wv[3] = _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4);
    if constexpr (kFive) {
        // Bit 4 of element l of sub-block s is bit s of qh[l].
        const __m512i qh = _mm512_broadcast_i64x4(load256(blk + 16));
        for (int g = 0; g < 4; ++g) {
            const int f = first_sub(g);
            const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << f)),
                                                   _mm256_set1_epi8(static_cast<char>(1 << (f + 2))), 1);
            wv[g] = _mm512_mask_add_epi8(wv[g], _mm512_test_epi8_mask(qh, bit), wv[g], _mm512_set1_epi8(16));
        }
    }
}

// A row's scale pairs (sc, 256·sc) per weight vector g, from its 8 scales (Q45KHeaders::sc_rows[r]).
__attribute__((always_inline)) inline void q45_k_scale_pairs(int64_t sc_row, __m512i* scale) {
    const __m512i row_sc = _mm512_set1_epi64(sc_row);
    for (int g = 0; g < 4; ++g) scale[g] = _mm512_shuffle_epi8(row_sc, _mm512_load_si512(kScalePair.idx[g]));
}

// sum over g of sc_g · (products of wv[g] with the token's planes h', l'): one row's vector (see the scheme).
__attribute__((always_inline)) inline __m512i q45_k_row_products(const __m512i* wv, const __m512i* scale,
                                                                 const Vec64* x) {
    __m512i s = _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
        const __m512i xh = _mm512_load_si512(x[g].b);
        const __m512i xl = _mm512_load_si512(x[4 + g].b);
        const __m512i ph = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[g], xh), 16);
        s = _mm512_dpwssd_epi32(s, _mm512_dpbusd_epi32(ph, xl, wv[g]), scale[g]);
    }
    return s;
}

// ---- q6_K (scheme in matmul_int8_decode_kquant_avx512vnni.cpp) ----

// A row's super-block `blk`: the 4 weight vectors (unsigned 0..63; vector g = sub-blocks 4g .. 4g+3, one
// 128-bit lane each), the scale word of each lane (scale_of[g], high word zero) and the pairs (-sc_j, -sc_j).
__attribute__((always_inline)) inline void q6_k_row_vectors(const uint8_t* blk, __m512i* wv, __m512i* scale_of,
                                                            __m512i& neg_scale_pairs) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30), low16 = _mm512_set1_epi32(0xFFFF);
    // Per 256-bit half (elements k = 0 / 1 of a 64-byte vector, or k = 2 / 3): where qh's bits 2k, 2k+1 go
    // to bits 4, 5 of the weight byte.
    const __m512i qh_up = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i qh_down = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sc = _mm512_cvtepi8_epi32(load128(blk + 192));
    const __m512i scw = _mm512_and_si512(sc, low16);  // sc_j as int16, zero high word
    const __m512i nsc = _mm512_sub_epi32(_mm512_setzero_si512(), sc);
    neg_scale_pairs = _mm512_ternarylogic_epi32(nsc, _mm512_slli_epi32(nsc, 16), low16, 0xEC);  // (-sc_j, -sc_j)
    for (int h = 0; h < 2; ++h) {
        // 64 quant bytes: elements 128h + 0..63 from the low nibbles, + 64..127 from the high.
        const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(load256(blk + 128 + 32 * h));
        wv[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, low4), _mm512_sllv_epi16(qh, qh_up), bits45, 0xF8);
        wv[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                                  _mm512_srlv_epi16(qh, qh_down), bits45, 0xF8);
    }
    for (int g = 0; g < 4; ++g) {
        scale_of[g] = _mm512_permutexvar_epi32(
            _mm512_add_epi32(_mm512_set1_epi32(4 * g),
                             _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)),
            scw);
    }
}

// (16 · sum16_j) in both words of lane j, for a plane's 16-element sums of one super-block.
__attribute__((always_inline)) inline __m512i q6_k_offset_pairs(const int32_t* sum16) {
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    const __m512i s = _mm512_slli_epi32(_mm512_loadu_si512(sum16), 4);
    return _mm512_ternarylogic_epi32(s, _mm512_slli_epi32(s, 16), low16, 0xEC);  // (a & c) | b
}

// One row's vector for a token: lanes 0-7 the plane h's partial sums, 8-15 the plane l's. ph, pl: the
// token's planes at the super-block; oh, ol: its q6_k_offset_pairs.
__attribute__((always_inline)) inline __m512i q6_k_row_products(const __m512i* wv, const __m512i* scale_of,
                                                                __m512i neg_scale_pairs, __m512i oh, __m512i ol,
                                                                const int8_t* ph, const int8_t* pl) {
    __m512i s_h = _mm512_dpwssd_epi32(_mm512_setzero_si512(), neg_scale_pairs, oh);
    __m512i s_l = _mm512_dpwssd_epi32(_mm512_setzero_si512(), neg_scale_pairs, ol);
    for (int g = 0; g < 4; ++g) {
        s_h = _mm512_dpwssd_epi32(
            s_h, _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[g], _mm512_loadu_si512(ph + 64 * g)), scale_of[g]);
        s_l = _mm512_dpwssd_epi32(
            s_l, _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[g], _mm512_loadu_si512(pl + 64 * g)), scale_of[g]);
    }
    return _mm512_add_epi32(_mm512_mask_blend_epi32(0xFF00, s_h, s_l),
                            _mm512_shuffle_i64x2(s_h, s_l, _MM_SHUFFLE(1, 0, 3, 2)));
}

}  // namespace
}  // namespace kvstash::kernels::int8_avx512
