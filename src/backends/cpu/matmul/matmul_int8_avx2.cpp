// AVX2 path of the int8-activation matmul: bitwise equal to the scalar definition
// (reference/matmul_int8_ref.cpp), whatever the token count or row range.
//
// q8_0 (and q5_0, q4_0, q4_1, below) has its own kernels on the int16 activations q = 256·h + l
// (QuantizedActivations::q):
// vpmaddwd of int16 weights (|w| <= 128) with int16 activations (|q| <= 32639) gives exact int32 sums of
// two products, so a block's S_b = sum w·q (|S_b| <= 32·128·32639 < 2^31) is exact in any grouping. The
// float step of the definition, acc = fma(fl(d·dx), float(S_b), acc), runs on 8 outputs at once, per
// block in order, with the same single roundings (fl(d·dx) one multiply, cvtdq2ps round to nearest even,
// one fma), so each output gets the definition's bits.
//
// Many tokens (prefill, more than kFewTokensMax): a tile of 8 weight rows is unpacked once into int16
// with pairs of consecutive elements of each row in one dword (dword lane = row), so one vpmaddwd with
// a token's activation pair broadcast adds 2 products to each row's sum: a block's S_b for 8 rows needs
// no horizontal reduction. Register tiles of 2 such row tiles × kTokenTile tokens: each loaded weight
// vector serves 3 tokens, each broadcast activation pair 16 rows.
// Few tokens (decode, up to kFewTokensMax): no unpacked copy. Per row and block, vpmaddwd of the sign-extended weights
// with the token's activations leaves 8 partial sums; 8 rows' are reduced together (vphaddd tree, built as the rows
// are read so that nothing spills) into one vector of the 8 rows' S_b. The pass is bound by reading the weights
// from memory: a tile's 8 rows are contiguous, so it prefetches the tile ahead once, one prefetch per 64-byte line.
//
// q5_0 (kept as stored on this path: model/weights.cpp repacks it to q8_0 only where no kernel reads it)
// runs the same kernels: each block's 32 values q - 16 are rebuilt as int8 (nibbles | fifth bit << 4, minus
// 16: exactly the q8_0 block's repacked values, with the same fp16 d), so its outputs are bitwise those of the
// repacked q8_0 matrix, from 22 bytes a block instead of 34 (decode reads the weights from memory).
//
// q4_0 / q4_1 run them too: the 16 nibble bytes zero-extended to int16 (vpmovzxbw), the low nibbles masked
// (elements 0-15) and the high ones shifted down (16-31), 3 operations per row and block. The few-token kernel
// multiplies the raw nibbles q and makes q4_0's S_b = sum (q - 8)·x as sum q·x - 8·sum x (sum x = 256·h32 + l32,
// exact): one subtraction per 8 rows. q4_1 adds the definition's second step per block,
// acc = fma(m, fl(dx · float(sum x)), acc), with its fp16 mins converted like the scales. Measured per thread
// against the f32-activation kernels (docs/benchmarks-history.md, "q4_0 / q4_1 with integer activations on AVX2"):
// one token 1.6-2.6× (1.7× from DRAM); SmolLM2's 512-token prefill 1.28× (whole model, one thread).
//
// The K-quants: matmul_int8_kquant_avx2.cpp.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#include <immintrin.h>

#include <algorithm>

#define KVSTASH_INT8_DOT_NAMESPACE int8_avx2
#include "backends/cpu/matmul/matmul_int8_dot.h"
#include "backends/cpu/runtime/scratch.h"

namespace kvstash::kernels {
namespace {

constexpr int kRows = 8;              // rows per tile: the 8 lanes of a vector
constexpr int kTokenTile = 3;         // tokens per register tile (with 2 row tiles: 6 int32 sums + 6 f32 sums)
constexpr int64_t kFewTokensMax = 6;  // up to this many tokens: the few-token kernel (no unpacked copy)

__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

int32_t load_i32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// A 32-element block with an fp16 scale d first and integer weights: kBytes per block; load(blk, lo, hi) gives
// its integer weights as int16, elements 0-15 in lo and 16-31 in hi.
struct BlockQ8_0 {
    static constexpr int64_t kBytes = 34;  // fp16 d, 32 int8
    static constexpr int kOffset = 0;
    static constexpr bool kHasMin = false;
    static void load_raw(const uint8_t* blk, __m256i& lo, __m256i& hi) { load(blk, lo, hi); }
    static void load(const uint8_t* blk, __m256i& lo, __m256i& hi) {
        lo = _mm256_cvtepi8_epi16(load128(blk + 2));
        hi = _mm256_cvtepi8_epi16(load128(blk + 18));
    }
};

// q4_0 / q4_1: fp16 d (q4_1: then fp16 m), 16 nibble bytes: element j < 16 the low nibble of byte j, element 16 + j
// its high nibble. load_raw gives the nibbles q (0..15); the definition's integer weights are q - kOffset
// (q4_0: q - 8), which load gives. The few-token kernel multiplies the raw nibbles and subtracts
// kOffset · sum_b(q_x) from the block's exact sum instead (the same integer S_b, one operation per 8 rows).
template <int64_t Bytes, int Offset, bool Min>
struct BlockNibbles {
    static constexpr int64_t kBytes = Bytes;
    static constexpr int kOffset = Offset;
    static constexpr bool kHasMin = Min;
    static void load_raw(const uint8_t* blk, __m256i& lo, __m256i& hi) {
        const __m256i q = _mm256_cvtepu8_epi16(load128(blk + kBytes - 16));  // int16 lane j: byte j (< 256)
        lo = _mm256_and_si256(q, _mm256_set1_epi16(0x0F));
        hi = _mm256_srli_epi16(q, 4);
    }
    static void load(const uint8_t* blk, __m256i& lo, __m256i& hi) {
        load_raw(blk, lo, hi);
        lo = _mm256_sub_epi16(lo, _mm256_set1_epi16(kOffset));
        hi = _mm256_sub_epi16(hi, _mm256_set1_epi16(kOffset));
    }
};
using BlockQ4_0 = BlockNibbles<18, 8, false>;
using BlockQ4_1 = BlockNibbles<20, 0, true>;

struct BlockQ5_0 {
    static constexpr int64_t kBytes = 22;  // fp16 d, 32 fifth bits (uint32, bit j = element j), 16 nibble bytes
    static constexpr int kOffset = 0;
    static constexpr bool kHasMin = false;
    static void load_raw(const uint8_t* blk, __m256i& lo, __m256i& hi) { load(blk, lo, hi); }
    // Element j < 16: low nibble of byte j; element 16 + j: its high nibble; | bit j of qh << 4; minus 16.
    static void load(const uint8_t* blk, __m256i& lo, __m256i& hi) {
        const __m128i qs = load128(blk + 6);
        const __m128i nib = _mm_set1_epi8(0x0F);
        // Byte k of the 32 fifth-bit bytes: 0x10 where bit k of qh is set (byte k / 8 of qh broadcast to 8 lanes,
        // each lane tested against its own bit).
        const __m256i bytes = _mm256_shuffle_epi8(
            _mm256_set1_epi32(load_i32(blk + 2)),
            _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
        const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
        const __m256i fifth =
            _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
        const __m256i v = _mm256_sub_epi8(
            _mm256_or_si256(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), nib), _mm_and_si128(qs, nib)), fifth),
            _mm256_set1_epi8(16));
        lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
        hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
    }
};

// The fp16 scales of block b of 8 rows as f32 (F16C: exact, the bits of fp16_to_fp32 except that a
// signalling NaN comes back quiet, which the definition's first use of d, the product d·dx, does anyway).
// at: the fp16's byte offset in the block (0: d; 2: q4_1's m).
template <class Block>
__m256 row_scales(const uint8_t* const w[kRows], int64_t b, int at = 0) {
    alignas(16) uint16_t h[kRows];
    for (int r = 0; r < kRows; ++r) std::memcpy(&h[r], w[r] + b * Block::kBytes + at, 2);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

// ---- many tokens ----

// The 8×8 transpose of dwords: out[k] lane r = in[r] lane k.
void transpose_8x8(const __m256i in[8], __m256i* out) {
    __m256i t[8], u[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_epi32(in[2 * i], in[2 * i + 1]);      // k 0, 1 | 4, 5 of rows 2i, 2i+1
        t[2 * i + 1] = _mm256_unpackhi_epi32(in[2 * i], in[2 * i + 1]);  // k 2, 3 | 6, 7
    }
    for (int i = 0; i < 2; ++i) {  // rows 4i .. 4i+3: u[4i + j] = dword k = j | j + 4
        u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int j = 0; j < 4; ++j) {
        out[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
        out[j + 4] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
    }
}

// Rows [r0, r0 + nr) (nr <= 8) unpacked: w16 = n_blocks × 16 pairs × 8 rows × 2 int16 (pair k of block b
// of row r at ((b·16 + k)·8 + r)·2); d = n_blocks × 8 row scales, then (q4_1) n_blocks × 8 row mins. Missing
// rows repeat the last one (their lanes are never stored).
template <class Block>
void unpack_rows(const MatmulArgs& a, int64_t r0, int nr, int16_t* w16, float* d) {
    const int64_t n_blocks = a.cols / 32;
    const uint8_t* w[kRows];
    for (int r = 0; r < kRows; ++r) w[r] = a.W + static_cast<uint64_t>(r0 + std::min(r, nr - 1)) * a.row_bytes;
    for (int64_t b = 0; b < n_blocks; ++b) {
        __m256i lo[kRows], hi[kRows];
        for (int r = 0; r < kRows; ++r) Block::load(w[r] + b * Block::kBytes, lo[r], hi[r]);  // dword k = pair k
        _mm256_storeu_ps(d + b * kRows, row_scales<Block>(w, b));
        if (Block::kHasMin) _mm256_storeu_ps(d + (n_blocks + b) * kRows, row_scales<Block>(w, b, 2));
        auto* out = reinterpret_cast<__m256i*>(w16 + b * 16 * kRows * 2);
        __m256i tr[kRows];
        transpose_8x8(lo, tr);
        for (int k = 0; k < 8; ++k) _mm256_storeu_si256(out + k, tr[k]);
        transpose_8x8(hi, tr);
        for (int k = 0; k < 8; ++k) _mm256_storeu_si256(out + 8 + k, tr[k]);
    }
}

// The definition's q4_1 term for block b of token row t: fl(dx[b] · float(sum q)), sum q = 256·h32 + l32 (exact).
// All of them, n_tokens × n_blocks (q4_1's kernels read one per block and token); nullptr for the other types.
template <class Block>
const float* min_factors(const QuantizedActivations& xa) {
    if (!Block::kHasMin) return nullptr;
    thread_local ScratchArray buf;
    const int64_t n_blocks = xa.cols / 32;
    float* mf = buf.floats(static_cast<size_t>(xa.n_tokens * n_blocks));
    for (int64_t t = 0; t < xa.n_tokens; ++t) {
        const float* dx = xa.d_row(t);
        const int32_t* h32 = xa.h32_row(t);
        const int32_t* l32 = xa.l32_row(t);
        for (int64_t b = 0; b < n_blocks; ++b) mf[t * n_blocks + b] = dx[b] * static_cast<float>(256 * h32[b] + l32[b]);
    }
    return mf;
}

// Tokens [t0, t0 + T) against G unpacked 8-row tiles (w16 + g·w_stride, d + g·d_stride):
// out[(g·kTokenTile + t)·8 + r] = Y of (row 8g + r, token t0 + t). Each loaded weight vector serves T
// tokens and each broadcast activation pair G row tiles. q4_1: then acc = fma(m, mf, acc) per block (mf:
// min_factors).
template <class Block, int G, int T>
void tile_int16(const int16_t* w16, int64_t w_stride, const float* d, int64_t d_stride, int64_t n_blocks,
                const QuantizedActivations& xa, const float* mf, int64_t t0, float* out) {
    const int16_t* xq[T];
    const float* dx[T];
    __m256 acc[G][T];
    for (int t = 0; t < T; ++t) {
        xq[t] = xa.q_row(t0 + t);
        dx[t] = xa.d_row(t0 + t);
        for (int g = 0; g < G; ++g) {
            acc[g][t] = _mm256_setzero_ps();
            // Zeroed in a register: GCC otherwise turns this loop into a memset (rep stos) that the loop below
            // reads back at once, a store-forwarding stall per call.
            asm("" : "+x"(acc[g][t]));
        }
    }
    for (int64_t b = 0; b < n_blocks; ++b) {
        __m256i s[G][T];
        for (int g = 0; g < G; ++g) {
            for (int t = 0; t < T; ++t) s[g][t] = _mm256_setzero_si256();
        }
        const int16_t* wb = w16 + b * 16 * kRows * 2;
        for (int k = 0; k < 16; ++k) {
            __m256i w[G];
            for (int g = 0; g < G; ++g) w[g] = load256(wb + g * w_stride + k * kRows * 2);
            for (int t = 0; t < T; ++t) {
                const __m256i x = _mm256_set1_epi32(load_i32(xq[t] + b * 32 + 2 * k));
                for (int g = 0; g < G; ++g) s[g][t] = _mm256_add_epi32(s[g][t], _mm256_madd_epi16(w[g], x));
            }
        }
        for (int g = 0; g < G; ++g) {
            const __m256 db = _mm256_loadu_ps(d + g * d_stride + b * kRows);
            for (int t = 0; t < T; ++t) {
                const __m256 c = _mm256_mul_ps(db, _mm256_broadcast_ss(dx[t] + b));
                acc[g][t] = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(s[g][t]), acc[g][t]);
            }
            if (Block::kHasMin) {
                const __m256 mb = _mm256_loadu_ps(d + g * d_stride + (n_blocks + b) * kRows);
                for (int t = 0; t < T; ++t) {
                    acc[g][t] = _mm256_fmadd_ps(mb, _mm256_broadcast_ss(mf + (t0 + t) * n_blocks + b), acc[g][t]);
                }
            }
        }
    }
    for (int g = 0; g < G; ++g) {
        for (int t = 0; t < T; ++t) _mm256_storeu_ps(out + (g * kTokenTile + t) * kRows, acc[g][t]);
    }
}

using TileFn = void (*)(const int16_t*, int64_t, const float*, int64_t, int64_t, const QuantizedActivations&,
                        const float*, int64_t, float*);
// [G - 1][T]: the tile for G row tiles and T tokens.
template <class Block>
constexpr TileFn kTiles[2][kTokenTile + 1] = {
    {nullptr, tile_int16<Block, 1, 1>, tile_int16<Block, 1, 2>, tile_int16<Block, 1, 3>},
    {nullptr, tile_int16<Block, 2, 1>, tile_int16<Block, 2, 2>, tile_int16<Block, 2, 3>},
};

void store_tile(const MatmulArgs& a, int64_t r0, int nr, int64_t t0, int nt, const float* out) {
    for (int t = 0; t < nt; ++t) {
        float* y = a.Y + (t0 + t) * a.y_stride + r0;
        if (nr == kRows) {
            _mm256_storeu_ps(y, _mm256_loadu_ps(out + t * kRows));
        } else {
            for (int r = 0; r < nr; ++r) y[r] = out[t * kRows + r];
        }
    }
}

template <class Block>
void many_tokens(const MatmulArgs& a, int64_t row_begin, int64_t row_end, const float* mf) {
    thread_local ScratchArray w_buf, d_buf;
    const int64_t n_blocks = a.cols / 32;
    const int64_t w_stride = n_blocks * 16 * kRows * 2;                                 // per 8-row tile
    const int64_t d_stride = n_blocks * kRows * (Block::kHasMin ? 2 : 1);               // scales (and mins)
    auto* w16 = reinterpret_cast<int16_t*>(w_buf.ints(static_cast<size_t>(w_stride)));  // 2 tiles: int16 × 2
    float* d = d_buf.floats(static_cast<size_t>(2 * d_stride));
    alignas(32) float out[2 * kTokenTile * kRows];
    for (int64_t r0 = row_begin; r0 < row_end; r0 += 2 * kRows) {
        const int64_t n = std::min<int64_t>(2 * kRows, row_end - r0);
        const int groups = n > kRows ? 2 : 1;
        for (int g = 0; g < groups; ++g) {
            const int nr = static_cast<int>(std::min<int64_t>(kRows, n - g * kRows));
            unpack_rows<Block>(a, r0 + g * kRows, nr, w16 + g * w_stride, d + g * d_stride);
        }
        for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
            const int nt = static_cast<int>(std::min<int64_t>(kTokenTile, a.n_tokens - t0));
            kTiles<Block>[groups - 1][nt](w16, w_stride, d, d_stride, n_blocks, *a.xq, mf, t0, out);
            for (int g = 0; g < groups; ++g) {
                const int nr = static_cast<int>(std::min<int64_t>(kRows, n - g * kRows));
                store_tile(a, r0 + g * kRows, nr, t0, nt, out + g * kTokenTile * kRows);
            }
        }
    }
}

// ---- few tokens ----

// Least software-prefetch distance of the few-token kernel, bytes. Measured on the output matrix of Gemma 3
// (262,144 × 640 q8_0, 1 token, 1 thread; docs/benchmarks-history.md): 4-32 KiB alike, no software prefetch
// (the hardware prefetchers alone, 8 streams) half the speed.
constexpr int64_t kFewPrefetchBytes = 16384;

// Full tiles: 8 rows `stride` bytes apart from `base`. Tails (fewer than 8 rows): 8 row pointers, the missing
// rows repeating the last one (their lanes are never stored).
struct StridedRows {
    const uint8_t* base;
    int64_t stride;
    const uint8_t* row(int r) const { return base + r * stride; }
};
struct ListedRows {
    const uint8_t* const* w;
    const uint8_t* row(int r) const { return w[r]; }
};

// The fp16 scales of block b of 8 rows as f32 (F16C: exact, the bits of fp16_to_fp32 except that a
// signalling NaN comes back quiet, which the definition's first use of d, the product d·dx, does anyway).
// Built in a register (no store-to-load round trip).
template <class Block, class Rows>
__m256 row_scales_reg(const Rows& rows, int64_t b) {
    __m128i h = _mm_cvtsi32_si128(load_i32(rows.row(0) + b * Block::kBytes));
    h = _mm_insert_epi16(h, load_i32(rows.row(1) + b * Block::kBytes), 1);
    h = _mm_insert_epi16(h, load_i32(rows.row(2) + b * Block::kBytes), 2);
    h = _mm_insert_epi16(h, load_i32(rows.row(3) + b * Block::kBytes), 3);
    h = _mm_insert_epi16(h, load_i32(rows.row(4) + b * Block::kBytes), 4);
    h = _mm_insert_epi16(h, load_i32(rows.row(5) + b * Block::kBytes), 5);
    h = _mm_insert_epi16(h, load_i32(rows.row(6) + b * Block::kBytes), 6);
    h = _mm_insert_epi16(h, load_i32(rows.row(7) + b * Block::kBytes), 7);
    return _mm256_cvtph_ps(h);
}

// q4_1: the fp16 scales d and mins m of block b of 8 rows as f32 (as row_scales_reg), from one 4-byte load per
// row: dword lane r = d_r | m_r << 16, packed into the 8 d halves then the 8 m halves.
template <class Block, class Rows>
void row_scales_mins_reg(const Rows& rows, int64_t b, __m256& d, __m256& m) {
    __m128i a = _mm_cvtsi32_si128(load_i32(rows.row(0) + b * Block::kBytes));
    a = _mm_insert_epi32(a, load_i32(rows.row(1) + b * Block::kBytes), 1);
    a = _mm_insert_epi32(a, load_i32(rows.row(2) + b * Block::kBytes), 2);
    a = _mm_insert_epi32(a, load_i32(rows.row(3) + b * Block::kBytes), 3);
    __m128i c = _mm_cvtsi32_si128(load_i32(rows.row(4) + b * Block::kBytes));
    c = _mm_insert_epi32(c, load_i32(rows.row(5) + b * Block::kBytes), 1);
    c = _mm_insert_epi32(c, load_i32(rows.row(6) + b * Block::kBytes), 2);
    c = _mm_insert_epi32(c, load_i32(rows.row(7) + b * Block::kBytes), 3);
    const __m256i v = _mm256_set_m128i(c, a);
    // Per 128-bit half: d of 4 rows then m of 4 rows (uint16, no saturation); qwords reordered to d0-7, m0-7.
    const __m256i p = _mm256_permute4x64_epi64(
        _mm256_packus_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(v, 16)), 0xD8);
    d = _mm256_cvtph_ps(_mm256_castsi256_si128(p));
    m = _mm256_cvtph_ps(_mm256_extracti128_si256(p, 1));
}

// Row r's 8 partial sums of block b (int32 lanes; their total is S_b + kOffset·sum_b(q_x), exact: raw weights).
template <class Block, class Rows>
__m256i block_partials(const Rows& rows, int r, int64_t b, __m256i x0, __m256i x1) {
    __m256i lo, hi;
    Block::load_raw(rows.row(r) + b * Block::kBytes, lo, hi);
    return _mm256_add_epi32(_mm256_madd_epi16(lo, x0), _mm256_madd_epi16(hi, x1));
}

// One token against 8 rows: out[r] = Y of (row r, token t). The 8 rows' S_b are reduced pairwise as they
// are made (a vphaddd tree, at most 3 partial vectors live), so the loop keeps x0, x1, acc and the tree in
// registers. The first token's pass converts the rows' scales (into d, n_blocks × 8, then q4_1's mins; not kept: d
// null) and, the pass being bound by reading the weights from memory, prefetches the tile `ahead` bytes on, one
// prefetch per 64-byte line (the tile's 8 rows are contiguous: 8 × row_bytes bytes from rows.row(0)); later tokens
// reuse d and the cached rows.
template <class Block, bool kFirst, class Rows>
void few_tokens_row_tile(const Rows& rows, int64_t n_blocks, const uint8_t* prefetch_begin, const uint8_t* prefetch_end,
                         const QuantizedActivations& xa, const float* mf, int64_t t, float* d, float* out) {
    const int16_t* xq = xa.q_row(t);
    const float* dx = xa.d_row(t);
    // Lines to prefetch per block: the tile's bytes spread evenly over its blocks.
    const int64_t pf_step = n_blocks > 0 ? ((prefetch_end - prefetch_begin) / n_blocks + 63) / 64 * 64 : 0;
    const uint8_t* pf = prefetch_begin;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        if (kFirst) {
            const uint8_t* pf_stop = std::min(pf + pf_step, prefetch_end);
            for (; pf < pf_stop; pf += 64) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
        }
        const __m256i x0 = load256(xq + 32 * b), x1 = load256(xq + 32 * b + 16);
        const __m256i h01 =
            _mm256_hadd_epi32(block_partials<Block>(rows, 0, b, x0, x1), block_partials<Block>(rows, 1, b, x0, x1));
        const __m256i h23 =
            _mm256_hadd_epi32(block_partials<Block>(rows, 2, b, x0, x1), block_partials<Block>(rows, 3, b, x0, x1));
        const __m256i h0123 = _mm256_hadd_epi32(h01, h23);  // per 128-bit half: rows 0-3 (lanes 0-3 | 4-7)
        const __m256i h45 =
            _mm256_hadd_epi32(block_partials<Block>(rows, 4, b, x0, x1), block_partials<Block>(rows, 5, b, x0, x1));
        const __m256i h67 =
            _mm256_hadd_epi32(block_partials<Block>(rows, 6, b, x0, x1), block_partials<Block>(rows, 7, b, x0, x1));
        const __m256i h4567 = _mm256_hadd_epi32(h45, h67);
        __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                                     _mm256_permute2x128_si256(h0123, h4567, 0x31));
        if (Block::kOffset != 0) {  // S_b = sum q·x - kOffset · sum x (|kOffset · sum x| <= 8·32·32639)
            s = _mm256_sub_epi32(s, _mm256_set1_epi32(Block::kOffset * (256 * xa.h32_row(t)[b] + xa.l32_row(t)[b])));
        }
        __m256 db, mb;
        if (kFirst) {
            if (Block::kHasMin) {
                row_scales_mins_reg<Block>(rows, b, db, mb);
                if (d) _mm256_storeu_ps(d + (n_blocks + b) * kRows, mb);
            } else {
                db = row_scales_reg<Block>(rows, b);
            }
            if (d) _mm256_storeu_ps(d + b * kRows, db);
        } else {
            db = _mm256_loadu_ps(d + b * kRows);
            if (Block::kHasMin) mb = _mm256_loadu_ps(d + (n_blocks + b) * kRows);
        }
        const __m256 c = _mm256_mul_ps(db, _mm256_broadcast_ss(dx + b));
        acc = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(s), acc);
        if (Block::kHasMin) acc = _mm256_fmadd_ps(mb, _mm256_broadcast_ss(mf + t * n_blocks + b), acc);
    }
    _mm256_store_ps(out, acc);
}

template <class Block, class Rows>
void few_tokens_tile(const MatmulArgs& a, const Rows& rows, int64_t r0, int nr, const uint8_t* pf_begin,
                     const uint8_t* pf_end, const float* mf, float* d, float* out) {
    const int64_t n_blocks = a.cols / 32;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
        if (t == 0) {
            // One token: nothing reads the converted scales again.
            few_tokens_row_tile<Block, true>(rows, n_blocks, pf_begin, pf_end, *a.xq, mf, t,
                                             a.n_tokens > 1 ? d : nullptr, out);
        } else {
            few_tokens_row_tile<Block, false>(rows, n_blocks, pf_begin, pf_end, *a.xq, mf, t, d, out);
        }
        store_tile(a, r0, nr, t, 1, out);
    }
}

template <class Block>
void few_tokens(const MatmulArgs& a, int64_t row_begin, int64_t row_end, const float* mf) {
    thread_local ScratchArray d_buf;
    const int64_t n_blocks = a.cols / 32;
    const auto rb = static_cast<int64_t>(a.row_bytes);
    const int64_t tile_bytes = kRows * rb;
    // Prefetch distance: at least kFewPrefetchBytes, whole tiles (the tile `ahead` on is prefetched while this
    // one is read); never past the range's last row, or the last row this thread reads next (prefetch_row_end).
    const int64_t ahead = std::max<int64_t>(1, (kFewPrefetchBytes + tile_bytes - 1) / tile_bytes) * tile_bytes;
    const uint8_t* range_end = a.W + static_cast<uint64_t>(std::max(row_end, a.prefetch_row_end)) * a.row_bytes;
    float* d = d_buf.floats(static_cast<size_t>(n_blocks * kRows * (Block::kHasMin ? 2 : 1)));
    alignas(32) float out[kRows];
    int64_t r0 = row_begin;
    for (; r0 + kRows <= row_end; r0 += kRows) {
        const StridedRows rows{a.W + static_cast<uint64_t>(r0) * a.row_bytes, rb};
        const uint8_t* pf_begin = std::min(rows.base + ahead, range_end);
        const uint8_t* pf_end = std::min(pf_begin + tile_bytes, range_end);
        few_tokens_tile<Block>(a, rows, r0, kRows, pf_begin, pf_end, mf, d, out);
    }
    if (r0 < row_end) {
        const int nr = static_cast<int>(row_end - r0);
        const uint8_t* w[kRows];
        for (int r = 0; r < kRows; ++r) w[r] = a.W + static_cast<uint64_t>(r0 + std::min(r, nr - 1)) * a.row_bytes;
        few_tokens_tile<Block>(a, ListedRows{w}, r0, nr, range_end, range_end, mf, d, out);
    }
}

template <class Block>
void rows_int16(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const float* mf = min_factors<Block>(*a.xq);
    if (a.n_tokens <= kFewTokensMax) {
        few_tokens<Block>(a, row_begin, row_end, mf);
    } else {
        many_tokens<Block>(a, row_begin, row_end, mf);
    }
}

}  // namespace

void matmul_int8_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    switch (a.type) {
        case TensorType::Q4_0: return rows_int16<BlockQ4_0>(a, row_begin, row_end);
        case TensorType::Q4_1: return rows_int16<BlockQ4_1>(a, row_begin, row_end);
        case TensorType::Q8_0: return rows_int16<BlockQ8_0>(a, row_begin, row_end);
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K: return matmul_int8_rows_kquant_avx2(a, row_begin, row_end);
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: break;
    }
    if (a.type == kTensorTypeQ5_0) return rows_int16<BlockQ5_0>(a, row_begin, row_end);
    for (int64_t r = row_begin; r < row_end; ++r) {  // no integer path: matmul() never calls this
        const uint8_t* w = a.W + static_cast<uint64_t>(r) * a.row_bytes;
        for (int64_t t = 0; t < a.n_tokens; ++t) a.Y[t * a.y_stride + r] = int8_avx2::dot_int8(a.type, w, *a.xq, t);
    }
}

}  // namespace kvstash::kernels
