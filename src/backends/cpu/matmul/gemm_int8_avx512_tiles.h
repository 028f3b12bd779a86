// Prefill GEMM of q4_K, q6_K and q8_0 weights with 16-bit two-plane activations (quantize_act.h) on AVX-512 VNNI:
// bitwise the scalar definition (reference/matmul_int8_ref.cpp) for any token count and any row range.
//
// Why a second many-token kernel beside the 16-row tiles (matmul_int8_avx512_tiles.h). Profiled on an 8B-shaped prefill
// (docs/benchmarks.md, "Where an 8B prefill's time goes"), that kernel's inner step is one 16-row weight vector
// against 4-6 tokens: per vpdpbusd it loads about one vector (the weights, or a broadcast activation dword), so the
// two load ports, not the two vpdpbusd ports, set its pace; and its 16-row tiles are unpacked from weights that
// nobody prefetched, which stalls on memory for ~10% of the prefill. Here:
//   * a tile is 32 rows (two vectors of 16 int32 lanes, lane = row) × kChunkCols columns, unpacked into
//     unsigned bytes (q4_K: the nibble; q6_K: the 6-bit value; q8_0: q + 128) and transposed so that dword k of
//     the 16 rows of a half fills one 64-byte vector; 32 KiB (q8_0, q4_K, q6_K alike) stays in the L1 cache while
//     every token tile passes over it;
//   * each step multiplies both row vectors by NT tokens' broadcast activation dwords, on both planes: 4·NT
//     vpdpbusd for 2 + 2·NT loads;
//   * while a chunk is multiplied, the raw bytes of the next chunk (or the next tile's first) are prefetched.
// The arithmetic is the definition's: integer block (sub-block) sums are exact whatever the grouping, offsets
// (q8_0: -128, q6_K: -32) are exact corrections from the activation plane sums, and the float steps run per
// output in block order, with the accumulators carried across chunks through memory exactly.
//
// Shared by two instruction sets through the dot-product primitive of int8_dot_avx512.h (DotRun: vpdpbusd, or
// vpmaddubsw + vpmaddwd): AVX-512 VNNI (gemm_int8_avx512vnni.cpp) and AVX-512 F/BW without VNNI
// (gemm_int8_avx512.cpp), where q8_0 has its own chunk kernel on int16 weights (chunk_q8_0). Include only from such
// a file, which must also turn off floating-point contraction (as below).
#pragma once
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/matmul/int8_dot_avx512.h"
#include "backends/cpu/matmul/matmul_int8_avx512vnni.h"
#include "backends/cpu/runtime/scratch.h"

namespace kvstash::kernels {
namespace {
namespace gemm32 {

using namespace int8_avx512;

constexpr int kTileRows = 2 * kRows;  // 32 rows: two int32-lane vectors
constexpr int64_t kChunkCols = 1024;  // bytes per row of an unpacked tile chunk (whole q4_K / q6_K super-blocks)
constexpr int kTokenTile32 = 4;       // tokens per step, 32-element blocks (q8_0)
constexpr int kTokenTileSuper = 2;    // the same for super-blocks (more accumulators per token)

// Bytes per unpacked weight: 1 (unsigned bytes), or 2 for q8_0 without VNNI (int16 weights, chunk_q8_0 below); a
// chunk holds kChunkCols / unpacked_bytes columns.
int unpacked_bytes(TensorType type) { return !kDotVnni && type == TensorType::Q8_0 ? 2 : 1; }

// One unpacked chunk of a 32-row tile, as the chunk kernels read it. packed: (chunk bytes / 4) dwords k, each as two
// 64-byte vectors (rows 0-15, 16-31) of dword k of every row; per block b of the chunk and row i: d[b * 32 + i], m
// (q4_K: dmin); the K-quants' sub-block scales and mins sc / mn[(b * n_sub + j) * 32 + i]. Points into a Tile's
// buffers, or partly into repacked weights (repack_tiles.h).
struct TileView {
    const uint8_t* packed = nullptr;
    const float *d = nullptr, *m = nullptr;
    const int32_t *sc = nullptr, *mn = nullptr;
};

// The buffers a chunk is unpacked into.
struct Tile {
    uint8_t* u = nullptr;       // 32 × kChunkCols: row-major unsigned bytes (or int16) before the transpose
    uint8_t* packed = nullptr;  // 32 × kChunkCols
    float *d = nullptr, *m = nullptr;
    int32_t *sc = nullptr, *mn = nullptr;
    ScratchArray u_buf, packed_buf, d_buf, m_buf, sc_buf, mn_buf;
    void reserve() {
        const auto bytes = static_cast<size_t>(kTileRows * kChunkCols);
        u = u_buf.bytes(bytes);
        packed = packed_buf.bytes(bytes);
        const auto blocks = static_cast<size_t>(kChunkCols / 32 * kTileRows);  // 32-element blocks at most
        d = d_buf.floats(blocks);
        m = m_buf.floats(blocks);
        const auto subs = static_cast<size_t>(kChunkCols / 16 * kTileRows);  // q6_K: 16-element sub-blocks
        sc = sc_buf.ints(subs);
        mn = mn_buf.ints(subs);
    }
    TileView view() const { return {packed, d, m, sc, mn}; }
};

int block_bytes(TensorType type) {
    switch (type) {
        case TensorType::Q8_0: return 34;
        case TensorType::Q4_K: return 144;
        default: return 210;  // q6_K
    }
}

// Blocks [b0, b0 + nb) of row `w` (its first block) into tile row i.
void unpack_row(TensorType type, const uint8_t* w, int64_t b0, int64_t nb, int i, Tile& t) {
    uint8_t* u = t.u + static_cast<size_t>(i) * kChunkCols;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    if (type == TensorType::Q8_0) {
        w += b0 * 34;
#if defined(__AVX512VNNI__)
        const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
        for (int64_t b = 0; b < nb; ++b, w += 34, u += 32) {
            t.d[b * kTileRows + i] = fp16_at(w);
            store256(u, _mm256_xor_si256(load256(w + 2), bias));  // q + 128
        }
#else
        for (int64_t b = 0; b < nb; ++b, w += 34, u += 64) {
            t.d[b * kTileRows + i] = fp16_at(w);
            _mm512_storeu_si512(u, _mm512_cvtepi8_epi16(load256(w + 2)));  // q as int16
        }
#endif
    } else if (type == TensorType::Q4_K) {
        w += b0 * 144;
        for (int64_t b = 0; b < nb; ++b, w += 144, u += 256) {
            t.d[b * kTileRows + i] = fp16_at(w);
            t.m[b * kTileRows + i] = fp16_at(w + 2);
            for (int j = 0; j < 8; ++j) {
                int sc = 0, mn = 0;
                k_quant_scale_min(j, w + 4, &sc, &mn);
                t.sc[(b * 8 + j) * kTileRows + i] = sc;
                t.mn[(b * 8 + j) * kTileRows + i] = mn;
            }
            for (int g = 0; g < 4; ++g) {  // 32 bytes: elements 64g.. in the low nibbles, 64g + 32.. in the high
                const __m256i q = load256(w + 16 + 32 * g);
                store256(u + 64 * g, _mm256_and_si256(q, low4));
                store256(u + 64 * g + 32, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
            }
        }
    } else {  // q6_K: ql[128] | qh[64] | int8 scales[16] | d
        const __m256i bits45 = _mm256_set1_epi8(0x30);
        w += b0 * 210;
        for (int64_t b = 0; b < nb; ++b, w += 210, u += 256) {
            t.d[b * kTileRows + i] = fp16_at(w + 208);
            for (int j = 0; j < 16; ++j) t.sc[(b * 16 + j) * kTileRows + i] = static_cast<int8_t>(w[192 + j]);
            for (int h = 0; h < 2; ++h) {
                const __m256i ql0 = load256(w + 64 * h), ql1 = load256(w + 64 * h + 32);
                const __m256i qh = load256(w + 128 + 32 * h);
                uint8_t* o = u + 128 * h;
                // Bits 2k, 2k+1 of qh are bits 4, 5 of the k-th 32 elements.
                store256(o, _mm256_or_si256(_mm256_and_si256(ql0, low4),
                                            _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)));
                store256(o + 32, _mm256_or_si256(_mm256_and_si256(ql1, low4),
                                                 _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)));
                store256(o + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                                 _mm256_and_si256(qh, bits45)));
                store256(o + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                                 _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)));
            }
        }
    }
}

// Tile rows past the matrix's end: zero weights and scales (their outputs are not stored).
void clear_row(int64_t nb, int n_sub, int i, Tile& t) {
    std::memset(t.u + static_cast<size_t>(i) * kChunkCols, 0, static_cast<size_t>(kChunkCols));
    for (int64_t b = 0; b < nb; ++b) {
        t.d[b * kTileRows + i] = t.m[b * kTileRows + i] = 0.0f;
        for (int j = 0; j < n_sub; ++j)
            t.sc[(b * n_sub + j) * kTileRows + i] = t.mn[(b * n_sub + j) * kTileRows + i] = 0;
    }
}

// packed[(k * 2 + half) * 64 + 4 * lane ..] = dword k of row 16 * half + lane, for the chunk's `cols` columns:
// per half and 32-column group, an 8 × 8 dword transpose of rows 0-7 and 8-15 at once.
void transpose(int64_t cols, Tile& t) {
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    for (int half = 0; half < 2; ++half) {
        const uint8_t* u = t.u + static_cast<size_t>(half) * kRows * kChunkCols;
        for (int64_t c = 0; c < cols / 32; ++c) {
            __m512 r[8];
            for (int i = 0; i < 8; ++i) {
                r[i] = _mm512_castsi512_ps(
                    join(load256(u + i * kChunkCols + 32 * c), load256(u + (i + 8) * kChunkCols + 32 * c)));
            }
            const __m512 t0 = _mm512_unpacklo_ps(r[0], r[1]), t1 = _mm512_unpackhi_ps(r[0], r[1]);
            const __m512 t2 = _mm512_unpacklo_ps(r[2], r[3]), t3 = _mm512_unpackhi_ps(r[2], r[3]);
            const __m512 t4 = _mm512_unpacklo_ps(r[4], r[5]), t5 = _mm512_unpackhi_ps(r[4], r[5]);
            const __m512 t6 = _mm512_unpacklo_ps(r[6], r[7]), t7 = _mm512_unpackhi_ps(r[6], r[7]);
            const __m512i s[8] = {_mm512_castps_si512(_mm512_shuffle_ps(t0, t2, 0x44)),
                                  _mm512_castps_si512(_mm512_shuffle_ps(t0, t2, 0xEE)),
                                  _mm512_castps_si512(_mm512_shuffle_ps(t1, t3, 0x44)),
                                  _mm512_castps_si512(_mm512_shuffle_ps(t1, t3, 0xEE)),
                                  _mm512_castps_si512(_mm512_shuffle_ps(t4, t6, 0x44)),
                                  _mm512_castps_si512(_mm512_shuffle_ps(t4, t6, 0xEE)),
                                  _mm512_castps_si512(_mm512_shuffle_ps(t5, t7, 0x44)),
                                  _mm512_castps_si512(_mm512_shuffle_ps(t5, t7, 0xEE))};
            uint8_t* out = t.packed + (static_cast<size_t>(c) * 8 * 2 + static_cast<size_t>(half)) * 64;
            for (int k = 0; k < 4; ++k) {  // dword k (rows' elements 4k..) from s[k], s[k + 4]
                _mm512_storeu_si512(out + (2 * k) * 64, _mm512_permutex2var_epi32(s[k], lo, s[k + 4]));
                _mm512_storeu_si512(out + (2 * k + 8) * 64, _mm512_permutex2var_epi32(s[k], hi, s[k + 4]));
            }
        }
    }
}

// ---- products of a chunk (blocks [b0, b0 + nb), absolute block b0 + b) with NT tokens from t0 ----
// acc[(j * 2 + half) * 16 ..]: token j's 32 row accumulators, carried from chunk to chunk.

// acc_io[(j * 2 + half) * 16 ..] in and out of registers around a chunk.
template <int NT>
inline void load_accumulators(const float* acc_io, __m512 (&acc)[NT][2]) {
    for (int j = 0; j < NT; ++j)
        for (int v = 0; v < 2; ++v) acc[j][v] = _mm512_loadu_ps(acc_io + (j * 2 + v) * kRows);
}

template <int NT>
inline void store_accumulators(const __m512 (&acc)[NT][2], float* acc_io) {
    for (int j = 0; j < NT; ++j)
        for (int v = 0; v < 2; ++v) _mm512_storeu_ps(acc_io + (j * 2 + v) * kRows, acc[j][v]);
}

#if defined(__AVX512VNNI__)
// Tokens t0 .. t0 + NT - 1 from 32-element block b0: the activation planes h and l, the block scales and the planes'
// block sums (the VNNI layout's chunk kernels: q8_0, q4_0, q4_1).
template <int NT>
struct TokenRows32 {
    const int8_t* xh[NT];
    const int8_t* xl[NT];
    const float* dx[NT];
    const int32_t* h32[NT];
    const int32_t* l32[NT];
    TokenRows32(const QuantizedActivations& xa, int64_t t0, int64_t b0) {
        for (int j = 0; j < NT; ++j) {
            xh[j] = xa.h_row(t0 + j) + b0 * 32;
            xl[j] = xa.l_row(t0 + j) + b0 * 32;
            dx[j] = xa.d_row(t0 + j) + b0;
            h32[j] = xa.h32_row(t0 + j) + b0;
            l32[j] = xa.l32_row(t0 + j) + b0;
        }
    }
};
#endif

#if defined(__AVX512VNNI__)
template <int NT>
void chunk_q8_0(const TileView& t, int64_t b0, int64_t nb, const QuantizedActivations& xa, int64_t t0, float* acc_io) {
    TokenRows32<NT> x(xa, t0, b0);
    auto& [xh, xl, dx, h32, l32] = x;
    __m512 acc[NT][2];
    load_accumulators(acc_io, acc);
    const uint8_t* wp = t.packed;
    for (int64_t b = 0; b < nb; ++b, wp += 8 * 2 * 64) {
        DotRun<255> s_h[NT][2], s_l[NT][2];
#pragma GCC unroll 8
        for (int j = 0; j < NT; ++j) {
            const __m512i h_init = _mm512_set1_epi32(-(h32[j][b] << 7));  // weights stored as q + 128
            const __m512i l_init = _mm512_set1_epi32(-(l32[j][b] << 7));
            s_h[j][0].start(h_init);
            s_h[j][1].start(h_init);
            s_l[j][0].start(l_init);
            s_l[j][1].start(l_init);
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            const __m512i w0 = _mm512_loadu_si512(wp + (2 * k) * 64);
            const __m512i w1 = _mm512_loadu_si512(wp + (2 * k + 1) * 64);
#pragma GCC unroll 8
            for (int j = 0; j < NT; ++j) {
                const __m512i h = bcast4(xh[j] + 32 * b + 4 * k), l = bcast4(xl[j] + 32 * b + 4 * k);
                s_h[j][0].add(k, 8, w0, h);
                s_h[j][1].add(k, 8, w1, h);
                s_l[j][0].add(k, 8, w0, l);
                s_l[j][1].add(k, 8, w1, l);
            }
        }
        const __m512 d[2] = {_mm512_loadu_ps(t.d + b * kTileRows), _mm512_loadu_ps(t.d + b * kTileRows + kRows)};
#pragma GCC unroll 8
        for (int j = 0; j < NT; ++j) {
            const __m512 x_scale = _mm512_set1_ps(dx[j][b]);
            for (int v = 0; v < 2; ++v) {  // |256·S_h + S_l| <= 32·128·32639 < 2^31: exact in int32
                const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(s_h[j][v].sum(), 8), s_l[j][v].sum());
                acc[j][v] = _mm512_fmadd_ps(_mm512_mul_ps(d[v], x_scale), _mm512_cvtepi32_ps(sum), acc[j][v]);
            }
        }
    }
    store_accumulators(acc, acc_io);
}

// q4_0 (kMin false: weights q - 8) / q4_1 (kMin: q·d + m) from the repacked layout (repack_tiles.h; there is no
// unrepacked 32-row tile of them): per block, 4 vectors per half of raw quant bytes, dword k of 16 rows, whose low
// nibbles are the block's elements 4k.. and high nibbles 16 + 4k..; split here, in registers, for every token of the
// step. The integers and float steps of matmul_int8_avx512_tiles.h's packed_tile_blocks32: the same bits.
template <int NT, bool kMin>
void chunk_q4(const TileView& t, int64_t b0, int64_t nb, const QuantizedActivations& xa, int64_t t0, float* acc_io) {
    TokenRows32<NT> x(xa, t0, b0);
    auto& [xh, xl, dx, h32, l32] = x;
    __m512 acc[NT][2];
    load_accumulators(acc_io, acc);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const uint8_t* wp = t.packed;
    for (int64_t b = 0; b < nb; ++b, wp += 4 * 2 * 64) {
        DotRun<255> s_h[NT][2], s_l[NT][2];
#pragma GCC unroll 8
        for (int j = 0; j < NT; ++j) {
            // q4_0: the weight is q - 8, an exact correction of -8 · (the plane's block sum); q4_1: none (its min term)
            const __m512i h_init = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(-(h32[j][b] << 3));
            const __m512i l_init = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(-(l32[j][b] << 3));
            s_h[j][0].start(h_init);
            s_h[j][1].start(h_init);
            s_l[j][0].start(l_init);
            s_l[j][1].start(l_init);
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m512i raw0 = _mm512_loadu_si512(wp + (2 * k) * 64);
            const __m512i raw1 = _mm512_loadu_si512(wp + (2 * k + 1) * 64);
            const __m512i lo[2] = {_mm512_and_si512(raw0, low4), _mm512_and_si512(raw1, low4)};
            const __m512i hi[2] = {_mm512_and_si512(_mm512_srli_epi16(raw0, 4), low4),
                                   _mm512_and_si512(_mm512_srli_epi16(raw1, 4), low4)};
#pragma GCC unroll 8
            for (int j = 0; j < NT; ++j) {
                const int8_t* h = xh[j] + 32 * b + 4 * k;
                const int8_t* l = xl[j] + 32 * b + 4 * k;
                for (int v = 0; v < 2; ++v) {
                    s_h[j][v].add(2 * k, 8, lo[v], bcast4(h));
                    s_h[j][v].add(2 * k + 1, 8, hi[v], bcast4(h + 16));
                    s_l[j][v].add(2 * k, 8, lo[v], bcast4(l));
                    s_l[j][v].add(2 * k + 1, 8, hi[v], bcast4(l + 16));
                }
            }
        }
        const __m512 d[2] = {_mm512_loadu_ps(t.d + b * kTileRows), _mm512_loadu_ps(t.d + b * kTileRows + kRows)};
#pragma GCC unroll 8
        for (int j = 0; j < NT; ++j) {
            const __m512 x_scale = _mm512_set1_ps(dx[j][b]);
            for (int v = 0; v < 2; ++v) {  // |256·S_h + S_l| <= 32·15·32639 < 2^31: exact in int32
                const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(s_h[j][v].sum(), 8), s_l[j][v].sum());
                acc[j][v] = _mm512_fmadd_ps(_mm512_mul_ps(d[v], x_scale), _mm512_cvtepi32_ps(sum), acc[j][v]);
                if constexpr (kMin) {
                    const float sx = dx[j][b] * static_cast<float>(256 * h32[j][b] + l32[j][b]);
                    acc[j][v] = _mm512_fmadd_ps(_mm512_loadu_ps(t.m + b * kTileRows + v * kRows), _mm512_set1_ps(sx),
                                                acc[j][v]);
                }
            }
        }
    }
    store_accumulators(acc, acc_io);
}

#else
// q8_0 without VNNI: its weights as int16 (|q| <= 128, two per dword: the tile holds 512 columns) against the int16
// activations x = 256·h + l (|x| <= 32639) with vpmaddwd, which adds two exact products per int32 lane; a block's
// |S| <= 32·128·32639 < 2^31, so S is exact and is the definition's 256·S_h + S_l, the same integer. (vpmaddubsw on
// the unsigned q + 128 of the VNNI layout could saturate its int16 sums.)
template <int NT>
void chunk_q8_0(const TileView& t, int64_t b0, int64_t nb, const QuantizedActivations& xa, int64_t t0, float* acc_io) {
    const int16_t* xq[NT];
    const float* dx[NT];
    for (int j = 0; j < NT; ++j) {
        xq[j] = xa.q_row(t0 + j) + b0 * 32;
        dx[j] = xa.d_row(t0 + j) + b0;
    }
    __m512 acc[NT][2];
    load_accumulators(acc_io, acc);
    const uint8_t* wp = t.packed;
    for (int64_t b = 0; b < nb; ++b, wp += 16 * 2 * 64) {
        __m512i s[NT][2];
        for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = _mm512_setzero_si512();
#pragma GCC unroll 16
        for (int k = 0; k < 16; ++k) {  // dword k: elements 2k, 2k + 1
            const __m512i w0 = _mm512_loadu_si512(wp + (2 * k) * 64);
            const __m512i w1 = _mm512_loadu_si512(wp + (2 * k + 1) * 64);
#pragma GCC unroll 8
            for (int j = 0; j < NT; ++j) {
                const __m512i x = _mm512_set1_epi32(load_i32(xq[j] + 32 * b + 2 * k));
                s[j][0] = _mm512_add_epi32(s[j][0], _mm512_madd_epi16(w0, x));
                s[j][1] = _mm512_add_epi32(s[j][1], _mm512_madd_epi16(w1, x));
                keep_chain(s[j][0]);
                keep_chain(s[j][1]);
            }
        }
        const __m512 d[2] = {_mm512_loadu_ps(t.d + b * kTileRows), _mm512_loadu_ps(t.d + b * kTileRows + kRows)};
#pragma GCC unroll 8
        for (int j = 0; j < NT; ++j) {
            const __m512 x_scale = _mm512_set1_ps(dx[j][b]);
            for (int v = 0; v < 2; ++v) {
                acc[j][v] = _mm512_fmadd_ps(_mm512_mul_ps(d[v], x_scale), _mm512_cvtepi32_ps(s[j][v]), acc[j][v]);
            }
        }
    }
    store_accumulators(acc, acc_io);
}
#endif

// Super-blocks of 256. kQ6: 16 sub-blocks of 16, offset -32, signed scales, no mins; otherwise (q4_K) 8 sub-blocks
// of 32 with 6-bit scales and mins.
template <int NT, bool kQ6>
void chunk_super(const TileView& t, int64_t b0, int64_t nb, const QuantizedActivations& xa, int64_t t0, float* acc_io) {
    constexpr int kSub = kQ6 ? 16 : 8;
    constexpr int kDwords = 64 / kSub;  // dwords (4 elements) per sub-block
    const int8_t *xh[NT], *xl[NT];
    const float* dx[NT];
    const int32_t *sh[NT], *sl[NT];  // plane sums per sub-block: q6_K per 16 elements, q4_K per 32
    for (int j = 0; j < NT; ++j) {
        xh[j] = xa.h_row(t0 + j) + b0 * 256;
        xl[j] = xa.l_row(t0 + j) + b0 * 256;
        dx[j] = xa.d_row(t0 + j) + b0;
        sh[j] = (kQ6 ? xa.h16_row(t0 + j) : xa.h32_row(t0 + j)) + b0 * kSub;
        sl[j] = (kQ6 ? xa.l16_row(t0 + j) : xa.l32_row(t0 + j)) + b0 * kSub;
    }
    const uint8_t* wp = t.packed;
    for (int64_t b = 0; b < nb; ++b) {
        __m512i s_h[NT][2], s_l[NT][2];
        for (int j = 0; j < NT; ++j) s_h[j][0] = s_h[j][1] = s_l[j][0] = s_l[j][1] = _mm512_setzero_si512();
        for (int sub = 0; sub < kSub; ++sub, wp += kDwords * 2 * 64) {
            DotRun<weight_bound(kQ6 ? 63 : 15)> p_h[NT][2], p_l[NT][2];  // q6_K: 6-bit weights; q4_K: nibbles
#pragma GCC unroll 8
            for (int j = 0; j < NT; ++j) {
                const __m512i h_init = kQ6 ? _mm512_set1_epi32(-(sh[j][b * kSub + sub] << 5)) : _mm512_setzero_si512();
                const __m512i l_init = kQ6 ? _mm512_set1_epi32(-(sl[j][b * kSub + sub] << 5)) : _mm512_setzero_si512();
                p_h[j][0].start(h_init);
                p_h[j][1].start(h_init);
                p_l[j][0].start(l_init);
                p_l[j][1].start(l_init);
            }
#pragma GCC unroll 8
            for (int k = 0; k < kDwords; ++k) {
                const __m512i w0 = _mm512_loadu_si512(wp + (2 * k) * 64);
                const __m512i w1 = _mm512_loadu_si512(wp + (2 * k + 1) * 64);
                const int64_t e = 256 * b + 4 * (kDwords * sub + k);
#pragma GCC unroll 8
                for (int j = 0; j < NT; ++j) {
                    const __m512i h = bcast4(xh[j] + e), l = bcast4(xl[j] + e);
                    p_h[j][0].add(k, kDwords, w0, h);
                    p_h[j][1].add(k, kDwords, w1, h);
                    p_l[j][0].add(k, kDwords, w0, l);
                    p_l[j][1].add(k, kDwords, w1, l);
                }
            }
            const int32_t* sc = t.sc + (b * kSub + sub) * kTileRows;
            const __m512i scale[2] = {_mm512_loadu_si512(sc), _mm512_loadu_si512(sc + kRows)};
#pragma GCC unroll 8
            for (int j = 0; j < NT; ++j) {
                for (int v = 0; v < 2; ++v) {
                    s_h[j][v] = _mm512_add_epi32(s_h[j][v], _mm512_mullo_epi32(p_h[j][v].sum(), scale[v]));
                    s_l[j][v] = _mm512_add_epi32(s_l[j][v], _mm512_mullo_epi32(p_l[j][v].sum(), scale[v]));
                }
            }
        }
        for (int v = 0; v < 2; ++v) {
            const __m512 d = _mm512_loadu_ps(t.d + b * kTileRows + v * kRows);
            for (int j = 0; j < NT; ++j) {
                float* acc_p = acc_io + (j * 2 + v) * kRows;
                const __m512 x_scale = _mm512_set1_ps(dx[j][b]);
                __m512 acc = _mm512_fmadd_ps(_mm512_mul_ps(d, x_scale), combine_planes_wide(s_h[j][v], s_l[j][v]),
                                             _mm512_loadu_ps(acc_p));
                if constexpr (!kQ6) {
                    // m_j (< 64) times a plane's 32-element sum (|.| <= 4096): both fit int16 and m_j's high
                    // halves are zero, so dot_i16 (vpdpwssd, or vpmaddwd and an add) adds exactly m_j · sum.
                    __m512i m_h = _mm512_setzero_si512(), m_l = _mm512_setzero_si512();
                    for (int sub = 0; sub < kSub; ++sub) {
                        const __m512i mn = _mm512_loadu_si512(t.mn + (b * kSub + sub) * kTileRows + v * kRows);
                        m_h = dot_i16(m_h, mn, _mm512_set1_epi32(sh[j][b * kSub + sub]));
                        m_l = dot_i16(m_l, mn, _mm512_set1_epi32(sl[j][b * kSub + sub]));
                    }
                    const __m512i m = _mm512_add_epi32(_mm512_slli_epi32(m_h, 8), m_l);
                    const __m512 dmin = _mm512_loadu_ps(t.m + b * kTileRows + v * kRows);  // q4_K only
                    acc = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, x_scale), _mm512_cvtepi32_ps(m), acc);
                }
                _mm512_storeu_ps(acc_p, acc);
            }
        }
    }
}

using ChunkFn = void (*)(const TileView&, int64_t, int64_t, const QuantizedActivations&, int64_t, float*);

template <int NT>
ChunkFn chunk_fn(TensorType type) {
    switch (type) {
        case TensorType::Q8_0: return &chunk_q8_0<NT>;
#if defined(__AVX512VNNI__)
        case TensorType::Q4_0: return &chunk_q4<NT, false>;  // repacked weights only (repacked_view)
        case TensorType::Q4_1: return &chunk_q4<NT, true>;
#endif
        case TensorType::Q4_K: return &chunk_super<std::min(NT, kTokenTileSuper), false>;
        default: return &chunk_super<std::min(NT, kTokenTileSuper), true>;
    }
}

ChunkFn chunk_for(TensorType type, int nt) {
    static_assert(kTokenTile32 == 4 && kTokenTileSuper <= 4);
    switch (nt) {
        case 1: return chunk_fn<1>(type);
        case 2: return chunk_fn<2>(type);
        case 3: return chunk_fn<3>(type);
        default: return chunk_fn<4>(type);
    }
}

// Bytes of the weights read next, hinted into the L2 cache a slice at a time while a chunk is multiplied (all at once,
// the prefetches queue behind each other and stall the thread that issues them): the raw bytes of rows [r0, r1),
// blocks [b0, b0 + nb), or one contiguous range (a repacked chunk).
struct NextChunk {
    const uint8_t* first = nullptr;  // row r0's block b0, or the range's start
    uint64_t row_bytes = 0;
    int64_t lines_per_row = 0, lines = 0;
    void set(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t b0, int64_t nb, int bytes) {
        first = a.W + static_cast<uint64_t>(r0) * a.row_bytes + static_cast<uint64_t>(b0 * bytes);
        row_bytes = a.row_bytes;
        lines_per_row = (nb * bytes + 63) / 64;
        lines = std::max<int64_t>(0, r1 - r0) * lines_per_row;
    }
    void set_range(const uint8_t* begin, uint64_t bytes) {
        first = begin;
        row_bytes = 0;
        lines = lines_per_row = static_cast<int64_t>((bytes + 63) / 64);
    }
    // Slice i of n.
    void prefetch(int64_t i, int64_t n) const {
        for (int64_t l = lines * i / n; l < lines * (i + 1) / n; ++l) {
            const uint8_t* p = first + static_cast<uint64_t>(l / lines_per_row) * row_bytes +
                               static_cast<uint64_t>(l % lines_per_row) * 64;
            _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
        }
    }
};

bool rows16_only() {
    static const bool only = [] {
        const char* gemm = std::getenv("KVSTASH_GEMM");
        return gemm != nullptr && std::string(gemm) == "rows16";
    }();
    return only;
}

// The types of the 32-row tiles.
bool has_tiles(TensorType type) {
    return type == TensorType::Q8_0 || type == TensorType::Q4_K || type == TensorType::Q6_K;
}

// Every token of a.xq times one chunk (blocks [b0, b0 + nb) of a tile), in steps of a few tokens, the accumulators
// acc (a.n_tokens × 32) carried; the next chunk's bytes prefetched a slice per step.
void multiply_chunk(const MatmulArgs& a, const TileView& view, int64_t b0, int64_t nb, const NextChunk& next,
                    float* acc) {
    const int token_tile = tensor_type_traits(a.type).block_size == 256 ? kTokenTileSuper : kTokenTile32;
    const int64_t n_steps = (a.n_tokens + token_tile - 1) / token_tile;
    for (int64_t step = 0; step < n_steps; ++step) {
        const int64_t t = step * token_tile;
        const int nt = static_cast<int>(std::min<int64_t>(token_tile, a.n_tokens - t));
        next.prefetch(step, n_steps);
        chunk_for(a.type, nt)(view, b0, nb, *a.xq, t, acc + t * kTileRows);
    }
}

// The outputs of rows r + [lo, hi) (0 <= lo < hi <= 32) of the tile at row r, every token.
void store_rows(const MatmulArgs& a, int64_t r, int lo, int hi, const float* acc) {
    for (int v = 0; v < 2; ++v) {
        const int first = std::clamp(lo - v * kRows, 0, kRows), end = std::clamp(hi - v * kRows, 0, kRows);
        if (first >= end) continue;
        const auto mask = static_cast<__mmask16>(((1u << end) - 1) & ~((1u << first) - 1));
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            _mm512_mask_storeu_ps(a.Y + t * a.y_stride + r + v * kRows, mask,
                                  _mm512_loadu_ps(acc + (t * 2 + v) * kRows));
        }
    }
}

// Rows [row_begin, row_end) of a product of many tokens, 32-row tiles unpacked from the weights as they lie; only for
// has_tiles(a.type).
void tile_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const int64_t block = tensor_type_traits(a.type).block_size;
    const int bytes = block_bytes(a.type);
    const int n_sub = a.type == TensorType::Q6_K ? 16 : a.type == TensorType::Q4_K ? 8 : 0;  // scales to clear
    const int64_t chunk_cols = kChunkCols / unpacked_bytes(a.type);
    thread_local Tile tile_storage;
    thread_local ScratchArray acc_buf;
    Tile& tile = tile_storage;
    tile.reserve();
    float* acc = acc_buf.floats(static_cast<size_t>(a.n_tokens * kTileRows));
    for (int64_t r = row_begin; r < row_end; r += kTileRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kTileRows, row_end - r));
        std::fill(acc, acc + a.n_tokens * kTileRows, 0.0f);
        for (int64_t c0 = 0; c0 < a.cols; c0 += chunk_cols) {
            const int64_t cols = std::min(chunk_cols, a.cols - c0);
            const int64_t b0 = c0 / block, nb = cols / block;
            for (int i = 0; i < kTileRows; ++i) {
                if (i < nr) {
                    unpack_row(a.type, a.W + static_cast<uint64_t>(r + i) * a.row_bytes, b0, nb, i, tile);
                } else {
                    clear_row(nb, n_sub, i, tile);
                }
            }
            transpose(cols * unpacked_bytes(a.type), tile);
            // The next chunk's raw bytes (or the next tile's first chunk) arrive while this one is multiplied.
            NextChunk next;
            if (c0 + chunk_cols < a.cols) {
                next.set(a, r, r + nr, b0 + nb, std::min(chunk_cols, a.cols - c0 - chunk_cols) / block, bytes);
            } else if (r + kTileRows < row_end) {
                next.set(a, r + kTileRows, std::min(row_end, r + 2 * kTileRows), 0,
                         std::min(chunk_cols, a.cols) / block, bytes);
            }
            multiply_chunk(a, tile.view(), b0, nb, next, acc);
        }
        store_rows(a, r, 0, nr, acc);
    }
}

}  // namespace gemm32
}  // namespace
}  // namespace kvstash::kernels
