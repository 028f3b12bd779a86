// AVX-512 many-token matmul (16-row tiles) for the quantized weight types, on 16-bit integer activations held as two
// int8 planes (quantize_act.h): bitwise equal to the scalar definition (reference/matmul_int8_ref.cpp), whatever the
// token count. Every integer product below is done once per plane (h, l) and combined exactly as 256·S_h + S_l.
//
// Many tokens (prefill). A tile of 16 weight rows is unpacked once into unsigned 8-bit integers in
// element order (q4: the nibble; q5_K: nibble + fifth bit; q6_K: the 6-bit value; q8_0: q + 128), then
// transposed so that 4 consecutive elements of the 16 rows fill one 64-byte vector (dword lane = row).
// One vpdpbusd (DotRun) of that vector with a token's 4 activation bytes broadcast adds 4 products to each row's
// int32 sum: lanes are rows, so a block's sum S_b needs no horizontal reduction, and the float step of
// the definition (acc = fma(d·dx, float(S_b), acc)) runs on 16 rows at once, in block order. The tile
// is reused by token tiles of 6 (K-quants: 4) tokens.
// Few tokens take other kernels (matmul_int8_avx512vnni.cpp and gemm_int8_avx512.cpp say which).
// Offsets (q4_0: -8, q8_0: -128, q6_K: -32 per sub-block) are exact integer corrections from the
// activation sums: a sum starts at -offset·sum(plane) instead of 0.
//
// Shared by two instruction sets through the dot-product primitive of int8_dot_avx512.h: AVX-512 VNNI
// (matmul_int8_avx512vnni.cpp) and AVX-512 F/BW without VNNI (gemm_int8_avx512.cpp), the same integers either way.
// Include only from such a file, which must also turn off floating-point contraction (as below).
#pragma once
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include <algorithm>

#include "backends/cpu/matmul/int8_dot_avx512.h"
#include "backends/cpu/matmul/matmul_int8_avx512vnni.h"
#include "backends/cpu/runtime/scratch.h"

namespace kvstash::kernels {
namespace {
namespace rows16 {

using namespace int8_avx512;

// Unpacked tile of 16 rows × a chunk of columns: u[i] = row i's unsigned integer weights (chunk bytes,
// row stride `stride`); per block (absolute index), per row: the f32 scale d (and m / dmin), and the
// K-quants' integer sub-block scales and mins.
struct PackedTile {
    uint8_t* u = nullptr;                  // kRows × stride
    uint8_t* packed = nullptr;             // (chunk / 4) × kRows × 4: dword k of every row
    float *d = nullptr, *m = nullptr;      // n_blocks × kRows
    int32_t *sc = nullptr, *mn = nullptr;  // n_blocks × n_sub × kRows (K-quants)
    ScratchArray u_buf, packed_buf, d_buf, m_buf, sc_buf, mn_buf;
    void reserve(int64_t chunk, int64_t n_blocks, int n_sub) {
        const auto need = static_cast<size_t>(kRows * chunk);
        u = u_buf.bytes(need);
        packed = packed_buf.bytes(need);
        const auto nb = static_cast<size_t>(n_blocks * kRows);
        d = d_buf.floats(nb);
        m = m_buf.floats(nb);
        const auto ns = static_cast<size_t>(n_blocks * n_sub * kRows);
        sc = sc_buf.ints(ns);
        mn = mn_buf.ints(ns);
    }
};

// ---- unpacking blocks [b0, b1) of one row (bytes `w` = the row's first block) into tile row i ----

void unpack_row(TensorType type, const uint8_t* w, int64_t b0, int64_t b1, int64_t stride, int i, PackedTile& t) {
    uint8_t* u = t.u + static_cast<size_t>(i) * static_cast<size_t>(stride);
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m256i low4y = _mm256_set1_epi8(0x0F);
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q4_1: {
            const bool with_min = type == TensorType::Q4_1;
            const int bytes = with_min ? 20 : 18;
            w += b0 * bytes;
            for (int64_t b = b0; b < b1; ++b, w += bytes, u += 32) {
                t.d[b * kRows + i] = fp16_at(w);
                if (with_min) t.m[b * kRows + i] = fp16_at(w + 2);
                const __m128i q = load128(w + (with_min ? 4 : 2));
                store128(u, _mm_and_si128(q, low4));
                store128(u + 16, _mm_and_si128(_mm_srli_epi16(q, 4), low4));
            }
            return;
        }
        case TensorType::Q8_0: {
            const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
            w += b0 * 34;
            for (int64_t b = b0; b < b1; ++b, w += 34, u += 32) {
                t.d[b * kRows + i] = fp16_at(w);
                store256(u, _mm256_xor_si256(load256(w + 2), bias));  // q + 128
            }
            return;
        }
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            const bool five = type == TensorType::Q5_K;
            const int bytes = five ? 176 : 144;
            w += b0 * bytes;
            for (int64_t b = b0; b < b1; ++b, w += bytes, u += 256) {
                t.d[b * kRows + i] = fp16_at(w);
                t.m[b * kRows + i] = fp16_at(w + 2);
                for (int j = 0; j < 8; ++j) {
                    int sc = 0, mn = 0;
                    k_quant_scale_min(j, w + 4, &sc, &mn);
                    t.sc[(b * 8 + j) * kRows + i] = sc;
                    t.mn[(b * 8 + j) * kRows + i] = mn;
                }
                const __m256i qh = load256(w + 16);
                const uint8_t* qs = w + (five ? 48 : 16);
                for (int g = 0; g < 4; ++g) {
                    const __m256i q = load256(qs + 32 * g);
                    __m256i lo = _mm256_and_si256(q, low4y);
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4y);
                    if (five) {  // bit 2g / 2g+1 of qh[l] is the fifth bit: 16 where set
                        const __m256i sixteen = _mm256_set1_epi8(16);
                        const __m256i bit_lo = _mm256_set1_epi8(static_cast<char>(1 << (2 * g)));
                        const __m256i bit_hi = _mm256_set1_epi8(static_cast<char>(1 << (2 * g + 1)));
                        lo = _mm256_or_si256(
                            lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_lo), bit_lo), sixteen));
                        hi = _mm256_or_si256(
                            hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_hi), bit_hi), sixteen));
                    }
                    store256(u + 64 * g, lo);
                    store256(u + 64 * g + 32, hi);
                }
            }
            return;
        }
        case TensorType::Q6_K: {
            const __m256i bits45 = _mm256_set1_epi8(0x30);
            w += b0 * 210;
            for (int64_t b = b0; b < b1; ++b, w += 210, u += 256) {
                t.d[b * kRows + i] = fp16_at(w + 208);
                for (int j = 0; j < 16; ++j) t.sc[(b * 16 + j) * kRows + i] = static_cast<int8_t>(w[192 + j]);
                for (int h = 0; h < 2; ++h) {
                    const __m256i ql0 = load256(w + 64 * h), ql1 = load256(w + 64 * h + 32);
                    const __m256i qh = load256(w + 128 + 32 * h);
                    uint8_t* o = u + 128 * h;
                    // Bits 2k, 2k+1 of qh are bits 4, 5 of the k-th 32 elements.
                    const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45);
                    const __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45);
                    const __m256i h2 = _mm256_and_si256(qh, bits45);
                    const __m256i h3 = _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45);
                    store256(o, _mm256_or_si256(_mm256_and_si256(ql0, low4y), h0));
                    store256(o + 32, _mm256_or_si256(_mm256_and_si256(ql1, low4y), h1));
                    store256(o + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4y), h2));
                    store256(o + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4y), h3));
                }
            }
            return;
        }
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: return;
    }
}

// Rows beyond the matrix in a partial tile: zero weights and scales (their outputs are not stored).
void clear_row(int64_t b0, int64_t b1, int64_t chunk, int64_t stride, int n_sub, int i, PackedTile& t) {
    std::memset(t.u + static_cast<size_t>(i) * static_cast<size_t>(stride), 0, static_cast<size_t>(chunk));
    for (int64_t b = b0; b < b1; ++b) {
        t.d[b * kRows + i] = 0.0f;
        t.m[b * kRows + i] = 0.0f;
        for (int j = 0; j < n_sub; ++j) t.sc[(b * n_sub + j) * kRows + i] = t.mn[(b * n_sub + j) * kRows + i] = 0;
    }
}

// packed[(c * 8 + k) * 64 + 4 * i ..] = dword k of elements 32c.. of row i, for the chunk's 32-column
// groups c: two 8 × 8 dword transposes at once (rows 0-7 in the low, 8-15 in the high 256 bits).
void transpose_tile(int64_t chunk, int64_t stride, PackedTile& t) {
    const uint8_t* u = t.u;
    const auto row_stride = static_cast<size_t>(stride);
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    for (int64_t c = 0; c < chunk / 32; ++c) {
        __m512 r[8];
        for (int i = 0; i < 8; ++i) {
            const __m256i a = load256(u + i * row_stride + 32 * c);
            const __m256i b = load256(u + (i + 8) * row_stride + 32 * c);
            r[i] = _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
        }
        const __m512 t0 = _mm512_unpacklo_ps(r[0], r[1]), t1 = _mm512_unpackhi_ps(r[0], r[1]);
        const __m512 t2 = _mm512_unpacklo_ps(r[2], r[3]), t3 = _mm512_unpackhi_ps(r[2], r[3]);
        const __m512 t4 = _mm512_unpacklo_ps(r[4], r[5]), t5 = _mm512_unpackhi_ps(r[4], r[5]);
        const __m512 t6 = _mm512_unpacklo_ps(r[6], r[7]), t7 = _mm512_unpackhi_ps(r[6], r[7]);
        const __m512i s0 = _mm512_castps_si512(_mm512_shuffle_ps(t0, t2, 0x44));
        const __m512i s1 = _mm512_castps_si512(_mm512_shuffle_ps(t0, t2, 0xEE));
        const __m512i s2 = _mm512_castps_si512(_mm512_shuffle_ps(t1, t3, 0x44));
        const __m512i s3 = _mm512_castps_si512(_mm512_shuffle_ps(t1, t3, 0xEE));
        const __m512i s4 = _mm512_castps_si512(_mm512_shuffle_ps(t4, t6, 0x44));
        const __m512i s5 = _mm512_castps_si512(_mm512_shuffle_ps(t4, t6, 0xEE));
        const __m512i s6 = _mm512_castps_si512(_mm512_shuffle_ps(t5, t7, 0x44));
        const __m512i s7 = _mm512_castps_si512(_mm512_shuffle_ps(t5, t7, 0xEE));
        uint8_t* out = t.packed + c * 8 * 64;
        _mm512_storeu_si512(out + 0 * 64, _mm512_permutex2var_epi32(s0, lo, s4));
        _mm512_storeu_si512(out + 1 * 64, _mm512_permutex2var_epi32(s1, lo, s5));
        _mm512_storeu_si512(out + 2 * 64, _mm512_permutex2var_epi32(s2, lo, s6));
        _mm512_storeu_si512(out + 3 * 64, _mm512_permutex2var_epi32(s3, lo, s7));
        _mm512_storeu_si512(out + 4 * 64, _mm512_permutex2var_epi32(s0, hi, s4));
        _mm512_storeu_si512(out + 5 * 64, _mm512_permutex2var_epi32(s1, hi, s5));
        _mm512_storeu_si512(out + 6 * 64, _mm512_permutex2var_epi32(s2, hi, s6));
        _mm512_storeu_si512(out + 7 * 64, _mm512_permutex2var_epi32(s3, hi, s7));
    }
}

// ---- products of the packed tile (blocks [b0, b1)) with NT tokens ----
// acc[j * kRows ..]: token j's 16 row accumulators, carried from chunk to chunk (loaded and stored
// exactly: the sequence of float operations per output is that of the definition). Every product is
// done on both activation planes (h, l); S = 256·S_h + S_l.

// 32-element blocks. kShift: the offset correction -(sum of the plane) << kShift (q4_0: 3 = ·8, q8_0:
// 7 = ·128); 0 = none (q4_1, with its min term instead). kMaxWeight: the largest unsigned weight (DotRun).
template <int NT, int kShift, bool kMin, int kMaxWeight>
void packed_tile_blocks32(const PackedTile& t, int64_t b0, int64_t b1, const QuantizedActivations& xa, int64_t t0,
                          float* acc_io) {
    const int8_t *xh[NT], *xl[NT];
    const float* dx[NT];
    const int32_t *h32[NT], *l32[NT];
    for (int j = 0; j < NT; ++j) {
        xh[j] = xa.h_row(t0 + j);
        xl[j] = xa.l_row(t0 + j);
        dx[j] = xa.d_row(t0 + j);
        h32[j] = xa.h32_row(t0 + j);
        l32[j] = xa.l32_row(t0 + j);
    }
    __m512 acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm512_loadu_ps(acc_io + j * kRows);
    const uint8_t* wp = t.packed;
    for (int64_t b = b0; b < b1; ++b, wp += 8 * 64) {
        DotRun<kMaxWeight> s_h[NT], s_l[NT];
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
            s_h[j].start(kShift ? _mm512_set1_epi32(-(h32[j][b] << kShift)) : _mm512_setzero_si512());
            s_l[j].start(kShift ? _mm512_set1_epi32(-(l32[j][b] << kShift)) : _mm512_setzero_si512());
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            const __m512i w = _mm512_loadu_si512(wp + 64 * k);
#pragma GCC unroll 16
            for (int j = 0; j < NT; ++j) {
                s_h[j].add(k, 8, w, bcast4(xh[j] + 32 * b + 4 * k));
                s_l[j].add(k, 8, w, bcast4(xl[j] + 32 * b + 4 * k));
            }
        }
        const __m512 d = _mm512_loadu_ps(t.d + b * kRows);
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
            const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(s_h[j].sum(), 8), s_l[j].sum());
            const __m512 c = _mm512_mul_ps(d, _mm512_set1_ps(dx[j][b]));
            acc[j] = _mm512_fmadd_ps(c, _mm512_cvtepi32_ps(sum), acc[j]);
            if constexpr (kMin) {
                const float sx = dx[j][b] * static_cast<float>(256 * h32[j][b] + l32[j][b]);
                acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(t.m + b * kRows), _mm512_set1_ps(sx), acc[j]);
            }
        }
    }
    for (int j = 0; j < NT; ++j) _mm512_storeu_ps(acc_io + j * kRows, acc[j]);
}

// 256-element super-blocks. kQ6: 16 sub-blocks of 16 with offset -32 and signed scales, no mins;
// otherwise 8 sub-blocks of 32 with mins (q4_K, q5_K). kMaxWeight: the largest unsigned weight (DotRun).
template <int NT, bool kQ6, int kMaxWeight>
void packed_tile_super_blocks(const PackedTile& t, int64_t b0, int64_t b1, const QuantizedActivations& xa, int64_t t0,
                              float* acc_io) {
    constexpr int kSub = kQ6 ? 16 : 8;  // sub-blocks per super-block
    constexpr int kDwords = 64 / kSub;  // dwords (4 elements) per sub-block: 4 or 8
    const int8_t *xh[NT], *xl[NT];
    const float* dx[NT];
    const int32_t *sh[NT], *sl[NT];  // plane sums: q6_K per 16 elements; q4_K/q5_K per 32
    for (int j = 0; j < NT; ++j) {
        xh[j] = xa.h_row(t0 + j);
        xl[j] = xa.l_row(t0 + j);
        dx[j] = xa.d_row(t0 + j);
        sh[j] = kQ6 ? xa.h16_row(t0 + j) : xa.h32_row(t0 + j);
        sl[j] = kQ6 ? xa.l16_row(t0 + j) : xa.l32_row(t0 + j);
    }
    __m512 acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm512_loadu_ps(acc_io + j * kRows);
    const uint8_t* wp = t.packed;
    for (int64_t b = b0; b < b1; ++b) {
        __m512i s_h[NT], s_l[NT];
        for (int j = 0; j < NT; ++j) s_h[j] = s_l[j] = _mm512_setzero_si512();
        for (int sub = 0; sub < kSub; ++sub, wp += kDwords * 64) {
            DotRun<kMaxWeight> p_h[NT], p_l[NT];
#pragma GCC unroll 16
            for (int j = 0; j < NT; ++j) {
                p_h[j].start(kQ6 ? _mm512_set1_epi32(-(sh[j][b * kSub + sub] << 5)) : _mm512_setzero_si512());
                p_l[j].start(kQ6 ? _mm512_set1_epi32(-(sl[j][b * kSub + sub] << 5)) : _mm512_setzero_si512());
            }
#pragma GCC unroll 8
            for (int k = 0; k < kDwords; ++k) {
                const __m512i w = _mm512_loadu_si512(wp + 64 * k);
                const int64_t e = 256 * b + 4 * (kDwords * sub + k);
#pragma GCC unroll 16
                for (int j = 0; j < NT; ++j) {
                    p_h[j].add(k, kDwords, w, bcast4(xh[j] + e));
                    p_l[j].add(k, kDwords, w, bcast4(xl[j] + e));
                }
            }
            const __m512i sc = _mm512_loadu_si512(t.sc + (b * kSub + sub) * kRows);
#pragma GCC unroll 16
            for (int j = 0; j < NT; ++j) {
                s_h[j] = _mm512_add_epi32(s_h[j], _mm512_mullo_epi32(p_h[j].sum(), sc));
                s_l[j] = _mm512_add_epi32(s_l[j], _mm512_mullo_epi32(p_l[j].sum(), sc));
            }
        }
        const __m512 d = _mm512_loadu_ps(t.d + b * kRows);
        const __m512 dmin = _mm512_loadu_ps(t.m + b * kRows);
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
            const __m512 x_scale = _mm512_set1_ps(dx[j][b]);
            acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, x_scale), combine_planes_wide(s_h[j], s_l[j]), acc[j]);
            if constexpr (!kQ6) {
                // m_j (< 64) times a plane's 32-element sum (|.| <= 4096): both fit int16, and the high
                // halves of m_j's lanes are zero, so dot_i16 (vpdpwssd, or vpmaddwd and an add) adds exactly m_j · sum.
                __m512i m_h = _mm512_setzero_si512(), m_l = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int sub = 0; sub < kSub; ++sub) {
                    const __m512i mn = _mm512_loadu_si512(t.mn + (b * kSub + sub) * kRows);
                    m_h = dot_i16(m_h, mn, _mm512_set1_epi32(sh[j][b * kSub + sub]));
                    m_l = dot_i16(m_l, mn, _mm512_set1_epi32(sl[j][b * kSub + sub]));
                }
                const __m512i m = _mm512_add_epi32(_mm512_slli_epi32(m_h, 8), m_l);
                acc[j] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, x_scale), _mm512_cvtepi32_ps(m), acc[j]);
            }
        }
    }
    for (int j = 0; j < NT; ++j) _mm512_storeu_ps(acc_io + j * kRows, acc[j]);
}

using PackedTileFn = void (*)(const PackedTile&, int64_t, int64_t, const QuantizedActivations&, int64_t, float*);

constexpr int kTokenTile = 6;   // tokens per register tile (32-element blocks)
constexpr int kTokenTileK = 4;  // the same for K-quants (more accumulators per token)

template <template <int> class F>
PackedTileFn packed_tile_for_tokens(int nt) {
    static_assert(kTokenTile == 6);
    switch (nt) {
        case 1: return F<1>::fn;
        case 2: return F<2>::fn;
        case 3: return F<3>::fn;
        case 4: return F<4>::fn;
        case 5: return F<5>::fn;
        default: return F<6>::fn;
    }
}

template <int NT>
struct PackedTileQ4_0 {
    static constexpr PackedTileFn fn = &packed_tile_blocks32<NT, 3, false, weight_bound(15)>;
};
template <int NT>
struct PackedTileQ4_1 {
    static constexpr PackedTileFn fn = &packed_tile_blocks32<NT, 0, true, weight_bound(15)>;
};
#if defined(__AVX512VNNI__)
template <int NT>
struct PackedTileQ8_0 {
    static constexpr PackedTileFn fn = &packed_tile_blocks32<NT, 7, false, 255>;
};
#endif
template <int NT>
struct PackedTileQ4_K {
    static constexpr PackedTileFn fn = &packed_tile_super_blocks<std::min(NT, kTokenTileK), false, weight_bound(15)>;
};
template <int NT>
struct PackedTileQ5_K {
    static constexpr PackedTileFn fn = &packed_tile_super_blocks<std::min(NT, kTokenTileK), false, weight_bound(31)>;
};
template <int NT>
struct PackedTileQ6_K {
    static constexpr PackedTileFn fn = &packed_tile_super_blocks<std::min(NT, kTokenTileK), true, weight_bound(63)>;
};

// nullptr where this instruction set has no tile kernel for the type (has_unsigned_tile).
PackedTileFn packed_tile_for(TensorType type, int nt) {
    if (!has_unsigned_tile(type)) return nullptr;
    switch (type) {
        case TensorType::Q4_0: return packed_tile_for_tokens<PackedTileQ4_0>(nt);
        case TensorType::Q4_1: return packed_tile_for_tokens<PackedTileQ4_1>(nt);
        case TensorType::Q4_K: return packed_tile_for_tokens<PackedTileQ4_K>(nt);
        case TensorType::Q5_K: return packed_tile_for_tokens<PackedTileQ5_K>(nt);
        case TensorType::Q6_K: return packed_tile_for_tokens<PackedTileQ6_K>(nt);
#if defined(__AVX512VNNI__)
        case TensorType::Q8_0: return packed_tile_for_tokens<PackedTileQ8_0>(nt);
#endif
        default: return nullptr;
    }
}

// A 16-row tile at a time: unpack the whole tile once, then token tile after token tile over it. Only for a
// type with a tile kernel here (has_unsigned_tile).
void packed_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const int64_t block = tensor_type_traits(a.type).block_size;
    const int64_t n_blocks = a.cols / block;
    const int n_sub = a.type == TensorType::Q6_K ? 16 : 8;
    const int64_t chunk = a.cols;
    thread_local PackedTile tile;
    tile.reserve(chunk, n_blocks, n_sub);
    thread_local ScratchArray acc_buf;
    float* acc = acc_buf.floats(static_cast<size_t>(a.n_tokens * kRows));
    for (int64_t r = row_begin; r < row_end; r += kRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kRows, row_end - r));
        std::fill(acc, acc + a.n_tokens * kRows, 0.0f);
        for (int64_t c0 = 0; c0 < a.cols; c0 += chunk) {
            const int64_t c1 = std::min(a.cols, c0 + chunk);
            const int64_t b0 = c0 / block, b1 = c1 / block;
            for (int i = 0; i < kRows; ++i) {
                if (i < nr) {
                    unpack_row(a.type, a.W + static_cast<uint64_t>(r + i) * a.row_bytes, b0, b1, chunk, i, tile);
                } else {
                    clear_row(b0, b1, c1 - c0, chunk, n_sub, i, tile);
                }
            }
            transpose_tile(c1 - c0, chunk, tile);
            const int64_t token_tile = block == 256 ? kTokenTileK : kTokenTile;
            for (int64_t t = 0; t < a.n_tokens; t += token_tile) {
                const int nt = static_cast<int>(std::min<int64_t>(token_tile, a.n_tokens - t));
                packed_tile_for(a.type, nt)(tile, b0, b1, *a.xq, t, acc + t * kRows);
            }
        }
        const auto mask = static_cast<__mmask16>((1u << nr) - 1);
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            _mm512_mask_storeu_ps(a.Y + t * a.y_stride + r, mask, _mm512_loadu_ps(acc + t * kRows));
        }
    }
}

}  // namespace rows16
}  // namespace
}  // namespace kvstash::kernels
