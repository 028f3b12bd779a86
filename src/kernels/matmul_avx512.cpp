// AVX-512 matmul. Two ways to run a row × token tile, with the same arithmetic per output:
//  * fused (few tokens: decode steps): each weight block is decoded in registers and multiplied
//    straight into the accumulators; several rows at once, for memory-level parallelism;
//  * buffered (prefill): a tile of rows is decoded once into an L1-resident f32 buffer, then reused by
//    every token of a 64-token block with a register tile of 4 rows × 6 tokens.
// Decoded weights are bitwise dequantize_row's values in both (see the per-type notes below).
//
// Reduction order of one dot product Y[t][r] (the same in both ways and every tile shape, hence batch
// invariant):
//   acc (16 lanes) = 0; for k = 0, 16, 32, ...: acc = fma(w[k..k+15], x[k..k+15], acc)
//   (a partial last chunk is loaded masked, zeros beyond cols); result = hsum16(acc) (fixed tree).
#pragma GCC optimize("fp-contract=off")  // decode arithmetic exactly as written, never fused implicitly

// GCC 12's AVX-512 headers self-initialize "undefined" vectors (`__m512 __Y = __Y;`), which -Wall
// reports as uninitialized once inlined (GCC bug 105593). Silence it for the header lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/matmul_impl.h"

namespace kvstash::kernels {
namespace {

constexpr int kFusedRows = 4;                      // rows decoded together in the fused tile for 2 or 3 tokens
                                                   // (Block::kRowsOneToken for one token)
constexpr int kFusedMaxTokens = 3;                 // n_tokens up to this use the fused tile
constexpr int kFusedChunkedMaxTokens = 9;          // up to this, quantized types run the fused tile, 3 tokens at a time
constexpr int kRowTile = 4;                        // buffered: rows per register tile (and per decoded buffer)
constexpr int kTokenTile = 6;                      // buffered: tokens per register tile (4 × 6 accumulators)
constexpr int64_t kTokenBlock = 64;                // buffered: most tokens per pass over a decoded row tile
constexpr int64_t kActivationBlockBytes = 786432;  // buffered: activations of one pass (kept in L2)
constexpr int64_t kColumnSlice = 512;              // buffered: columns per pass of the token tiles over a row tile
constexpr int64_t kPrefetchBytes = 16384;          // fused: least distance of the weight prefetch (bytes)

// F16C conversion: exact, equal to fp16_to_fp32 except that a signalling NaN comes back quiet.
inline float load_fp16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline __m512i load_u8x16(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// (A function, not a namespace-scope constant: a static initializer would run AVX-512 code at program
// start, even on CPUs without it.)
inline __m512 nibble_values() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

// ---- block decoders ----
// A block type has two steps, so that the per-block scales are converted out of the inner loop:
//   Block::prepare(src, n, p)         writes kScales floats per block to p (fp16 scales converted,
//                                     K-quant sub-block scales multiplied out) for n <= kGroup blocks;
//   Block::step<S>(src, p, f)         for S = 0 .. kSteps-1 in turn, calls f(c, w) for the block's
//                                     16-element chunks c in element order (S covers a quarter of a
//                                     K-quant super-block, all of a small block); w = the 16 decoded
//                                     weights (p: this block's prepared floats).
// The fused tile interleaves rows step by step, so that each row's dependent chain of FMAs is short.
// The decoded weights are bitwise dequantize_row's (format/tensor_type.cpp): the scales are computed
// with the reference's operations, and the weights from them as noted per type.
//
// 4-bit types decode through a 16-entry table of the block's possible values, looked up by nibble
// (vpermps reads the low 4 index bits). A table entry q*d + m is computed as fma(q, d, m): q (4 bits)
// times d (an fp16 value, 11 significant bits, or d * 6-bit scale, 17 bits) is exact in fp32, so the
// fused and the reference's rounded-product-then-add give the same single rounding.

// Shuffle indices for gather_block_words: lane L takes word (L / kPer) * kStride + L % kPer of a group of 16
// blocks, from the pair of 64-byte loads `pair` (vpermt2w: index bit 5 picks the second load).
template <int kStride, int kPer>
struct BlockWordIndex {
    static constexpr int kLoads = (16 * kStride + 31) / 32;  // 64-byte loads per 16 blocks
    static constexpr int kPairs = (kLoads + 1) / 2;
    int16_t index[kPairs][32] = {};
    uint32_t lanes[kPairs] = {};
    constexpr BlockWordIndex() {
        for (int lane = 0; lane < 16 * kPer; ++lane) {
            const int word = lane / kPer * kStride + lane % kPer;
            index[word / 64][lane] = static_cast<int16_t>(word % 64);
            lanes[word / 64] |= 1u << lane;
        }
    }
};

// The kPer 16-bit words at the start of each of 16 consecutive blocks (kStride words apart), as lanes
// 0 .. 16 kPer - 1: a few 64-byte loads and one vpermt2w per 128 bytes, much cheaper than a gather.
// Reads only the 16 blocks' bytes (the last load is masked where they end: they may end a mapping).
template <int kStride, int kPer>
__attribute__((always_inline)) inline __m512i gather_block_words(const uint8_t* base) {
    static constexpr BlockWordIndex<kStride, kPer> kIndex;
    constexpr int kLoads = BlockWordIndex<kStride, kPer>::kLoads;
    constexpr int kLastBytes = 32 * kStride - 64 * (kLoads - 1);  // bytes of the blocks in the last load
    __m512i z[kLoads + 1];
#pragma GCC unroll 16
    for (int l = 0; l < kLoads - 1; ++l) z[l] = _mm512_loadu_si512(base + 64 * l);
    if constexpr (kLastBytes == 64) {
        z[kLoads - 1] = _mm512_loadu_si512(base + 64 * (kLoads - 1));
    } else {
        z[kLoads - 1] = _mm512_maskz_loadu_epi8((__mmask64(1) << kLastBytes) - 1, base + 64 * (kLoads - 1));
    }
    z[kLoads] = _mm512_setzero_si512();
    __m512i out = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int pair = 0; 2 * pair < kLoads; ++pair) {
        const __m512i index = _mm512_loadu_si512(kIndex.index[pair]);
        const __m512i words = _mm512_permutex2var_epi16(z[2 * pair], index, z[2 * pair + 1]);
        out = _mm512_mask_blend_epi16(kIndex.lanes[pair], out, words);
    }
    return out;
}

// Blocks that start with one fp16 scale d: p[b] = d of block b, b < n <= 16.
template <int kBytes>
void prepare_fp16_scale(const uint8_t* src, int64_t n, float* p) {
    if (n == 16) {
        _mm512_storeu_ps(p, _mm512_cvtph_ps(_mm512_castsi512_si256(gather_block_words<kBytes / 2, 1>(src))));
    } else {
        for (int64_t b = 0; b < n; ++b) p[b] = load_fp16(src + b * kBytes);  // a row's last, short group
    }
}

struct Q8_0 {  // x = q * d
    static constexpr int kElems = 32, kBytes = 34, kScales = 1, kGroup = 16;
    static constexpr int kSteps = 1, kStepChunks = 2, kRowsOneToken = 8;
    static void prepare(const uint8_t* src, int64_t n, float* p) { prepare_fp16_scale<kBytes>(src, n, p); }
    template <int S, class F>
    static void step(const uint8_t* s, const float* p, F&& f) {
        const __m512 d = _mm512_set1_ps(p[0]);
#pragma GCC unroll 16
        for (int h = 0; h < 2; ++h) {
            const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 + 16 * h)));
            f(h, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
        }
    }
};

struct Q4_0 {  // x = (q - 8) * d
    static constexpr int kElems = 32, kBytes = 18, kScales = 1, kGroup = 16;
    static constexpr int kSteps = 1, kStepChunks = 2, kRowsOneToken = 8;
    static void prepare(const uint8_t* src, int64_t n, float* p) { prepare_fp16_scale<kBytes>(src, n, p); }
    template <int S, class F>
    static void step(const uint8_t* s, const float* p, F&& f) {
        const __m512 centered = _mm512_sub_ps(nibble_values(), _mm512_set1_ps(8.0f));  // exact
        const __m512 table = _mm512_mul_ps(centered, _mm512_set1_ps(p[0]));
        const __m512i q = load_u8x16(s + 2);
        f(0, _mm512_permutexvar_ps(q, table));
        f(1, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table));
    }
};

struct Q4_1 {  // x = q * d + m
    static constexpr int kElems = 32, kBytes = 20, kScales = 2, kGroup = 16;
    static constexpr int kSteps = 1, kStepChunks = 2, kRowsOneToken = 8;
    // p[2b] = d, p[2b + 1] = m: the gathered words hold (d, m) as fp16 pairs, already interleaved.
    static void prepare(const uint8_t* src, int64_t n, float* p) {
        if (n == 16) {
            const __m512i words = gather_block_words<kBytes / 2, 2>(src);
            _mm512_storeu_ps(p, _mm512_cvtph_ps(_mm512_castsi512_si256(words)));
            _mm512_storeu_ps(p + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(words, 1)));
        } else {
            for (int64_t b = 0; b < n; ++b) {
                p[2 * b] = load_fp16(src + b * kBytes);
                p[2 * b + 1] = load_fp16(src + b * kBytes + 2);
            }
        }
    }
    template <int S, class F>
    static void step(const uint8_t* s, const float* p, F&& f) {
        const __m512 table = _mm512_fmadd_ps(nibble_values(), _mm512_set1_ps(p[0]), _mm512_set1_ps(p[1]));
        const __m512i q = load_u8x16(s + 4);
        f(0, _mm512_permutexvar_ps(q, table));
        f(1, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table));
    }
};

// q4_K / q5_K: 8 sub-blocks of 32 with x = (d * sc_j) * q - dmin * m_j. Prepared per super-block:
// p[j] = d * sc_j, p[8 + j] = -(dmin * m_j). Group g = bytes 32g..32g+31 of the quants holds sub-block
// 2g (low nibbles) and 2g+1 (high nibbles); q5_K adds bit 2g / 2g+1 of qh[l] as the fifth bit (its
// weights are computed with the reference's multiply-then-subtract, no table).
template <bool kFiveBit>
struct Q45_K {
    static constexpr int kElems = 256, kBytes = kFiveBit ? 176 : 144, kScales = 16, kGroup = 8;
    static constexpr int kSteps = 4, kStepChunks = 4, kRowsOneToken = 4;
    static void prepare(const uint8_t* row, int64_t n, float* p) {
        for (int64_t b = 0; b < n; ++b, row += kBytes, p += kScales) {
            // ggml's unpacking of the 12 scale bytes, 4 at a time: bytes of u[0], u[1] = scales 0..7,
            // of u[2], u[3] = mins 0..7 (the same values as k_quant_scale_min).
            uint32_t u[3];
            std::memcpy(u, row + 4, 12);
            constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
            const __m128i packed = _mm_setr_epi32(
                static_cast<int>(u[0] & kLow6), static_cast<int>((u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4)),
                static_cast<int>(u[1] & kLow6), static_cast<int>(((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4)));
            const __m512 factor =
                _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(load_fp16(row)), _mm512_set1_ps(-load_fp16(row + 2)));
            _mm512_storeu_ps(p, _mm512_mul_ps(factor, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(packed))));
        }
    }
    // Step g: group g (quant bytes 32g..32g+31), chunks 4g..4g+3.
    template <int g, class F>
    static void step(const uint8_t* s, const float* p, F&& f) {
        const uint8_t* qh = s + 16;
        const uint8_t* q = s + (kFiveBit ? 48 : 16) + 32 * g;
        const __m512 d1 = _mm512_set1_ps(p[2 * g]), m1 = _mm512_set1_ps(p[8 + 2 * g]);
        const __m512 d2 = _mm512_set1_ps(p[2 * g + 1]), m2 = _mm512_set1_ps(p[9 + 2 * g]);
        const __m512i q0 = load_u8x16(q), q1 = load_u8x16(q + 16);
        if constexpr (!kFiveBit) {
            const __m512 t1 = _mm512_fmadd_ps(nibble_values(), d1, m1);
            const __m512 t2 = _mm512_fmadd_ps(nibble_values(), d2, m2);
            f(4 * g + 0, _mm512_permutexvar_ps(q0, t1));
            f(4 * g + 1, _mm512_permutexvar_ps(q1, t1));
            f(4 * g + 2, _mm512_permutexvar_ps(_mm512_srli_epi32(q0, 4), t2));
            f(4 * g + 3, _mm512_permutexvar_ps(_mm512_srli_epi32(q1, 4), t2));
        } else {
            const __m512i low4 = _mm512_set1_epi32(0x0F), one = _mm512_set1_epi32(1);
            const __m512i h0 = load_u8x16(qh), h1 = load_u8x16(qh + 16);
            auto fifth = [&](__m512i h, int bit) {
                return _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, bit), one), 4);
            };
            auto value = [](__m512i qi, __m512 dd, __m512 neg_m) {  // fl(fl(dd * q) - m)
                return _mm512_add_ps(_mm512_mul_ps(dd, _mm512_cvtepi32_ps(qi)), neg_m);
            };
            f(4 * g + 0, value(_mm512_or_si512(_mm512_and_si512(q0, low4), fifth(h0, 2 * g)), d1, m1));
            f(4 * g + 1, value(_mm512_or_si512(_mm512_and_si512(q1, low4), fifth(h1, 2 * g)), d1, m1));
            f(4 * g + 2, value(_mm512_or_si512(_mm512_srli_epi32(q0, 4), fifth(h0, 2 * g + 1)), d2, m2));
            f(4 * g + 3, value(_mm512_or_si512(_mm512_srli_epi32(q1, 4), fifth(h1, 2 * g + 1)), d2, m2));
        }
    }
};

// q6_K: two halves of 128 elements; in each, element l + 32k (k = 0..3, l = 0..31) takes 4 low bits
// from ql and 2 high bits from qh: x = (d * sc[l/16 + 2k]) * (q - 32). Prepared: p[j] = d * sc[j].
struct Q6_K {
    static constexpr int kElems = 256, kBytes = 210, kScales = 16, kGroup = 8;
    static constexpr int kSteps = 4, kStepChunks = 4, kRowsOneToken = 4;
    static void prepare(const uint8_t* row, int64_t n, float* p) {
        for (int64_t b = 0; b < n; ++b, row += kBytes, p += kScales) {
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 192)));
            _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_set1_ps(load_fp16(row + 208)), _mm512_cvtepi32_ps(sc)));
        }
    }
    // Step S: half S / 2, k = 2 (S % 2) and 2 (S % 2) + 1: chunks 4S .. 4S+3.
    template <int S, class F>
    static void step(const uint8_t* s, const float* p, F&& f) {
        constexpr int half = S / 2, k0 = 2 * (S % 2);
        const __m512i low4 = _mm512_set1_epi32(0x0F), three = _mm512_set1_epi32(3), bias = _mm512_set1_epi32(32);
        const uint8_t* ql = s + 64 * half;
        const uint8_t* qh = s + 128 + 32 * half;
        p += 8 * half;
        __m512i q[2][2];  // [k - k0][l / 16]
#pragma GCC unroll 16
        for (int c = 0; c < 2; ++c) {
            const __m512i a = load_u8x16(ql + 16 * c), a2 = load_u8x16(ql + 32 + 16 * c);
            const __m512i h = load_u8x16(qh + 16 * c);
            if constexpr (k0 == 0) {
                q[0][c] = _mm512_or_si512(_mm512_and_si512(a, low4), _mm512_slli_epi32(_mm512_and_si512(h, three), 4));
                q[1][c] = _mm512_or_si512(_mm512_and_si512(a2, low4),
                                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2), three), 4));
            } else {
                q[0][c] = _mm512_or_si512(_mm512_srli_epi32(a, 4),
                                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 4), three), 4));
                q[1][c] = _mm512_or_si512(_mm512_srli_epi32(a2, 4), _mm512_slli_epi32(_mm512_srli_epi32(h, 6), 4));
            }
        }
#pragma GCC unroll 16
        for (int k = 0; k < 2; ++k) {
#pragma GCC unroll 16
            for (int c = 0; c < 2; ++c) {
                const __m512 qf = _mm512_cvtepi32_ps(_mm512_sub_epi32(q[k][c], bias));
                f(8 * half + 2 * (k0 + k) + c, _mm512_mul_ps(_mm512_set1_ps(p[c + 2 * (k0 + k)]), qf));
            }
        }
    }
};

// Runs f(std::integral_constant<int, S>) for S = 0 .. N-1 (compile-time step numbers).
template <class F, int... S>
__attribute__((always_inline)) inline void for_steps(std::integer_sequence<int, S...>, F&& f) {
    (f(std::integral_constant<int, S>{}), ...);
}

template <class Block>
void decode_blocks(const uint8_t* src, float* dst, int64_t n) {
    const int64_t n_blocks = n / Block::kElems;
    alignas(64) float scales[Block::kGroup * Block::kScales];
    for (int64_t g = 0; g < n_blocks; g += Block::kGroup) {
        const int64_t n_group = std::min<int64_t>(Block::kGroup, n_blocks - g);
        Block::prepare(src + g * Block::kBytes, n_group, scales);
        for (int64_t b = 0; b < n_group; ++b) {
            float* out = dst + (g + b) * Block::kElems;
            for_steps(std::make_integer_sequence<int, Block::kSteps>{}, [&](auto step) {
                Block::template step<step.value>(src + (g + b) * Block::kBytes, scales + b * Block::kScales,
                                                 [out](int c, __m512 w) { _mm512_storeu_ps(out + 16 * c, w); });
            });
        }
    }
}

void decode_f16(const uint8_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i))));
    }
    for (; i < n; ++i) dst[i] = load_fp16(src + 2 * i);  // the tail, with the same conversion
}

void decode_bf16(const uint8_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
    for (; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
    }
}

void decode_row(TensorType type, const uint8_t* src, float* dst, int64_t n) {
    switch (type) {
        case TensorType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
        case TensorType::F16: decode_f16(src, dst, n); return;
        case TensorType::BF16: decode_bf16(src, dst, n); return;
        case TensorType::Q8_0: decode_blocks<Q8_0>(src, dst, n); return;
        case TensorType::Q4_0: decode_blocks<Q4_0>(src, dst, n); return;
        case TensorType::Q4_1: decode_blocks<Q4_1>(src, dst, n); return;
        case TensorType::Q4_K: decode_blocks<Q45_K<false>>(src, dst, n); return;
        case TensorType::Q5_K: decode_blocks<Q45_K<true>>(src, dst, n); return;
        case TensorType::Q6_K: decode_blocks<Q6_K>(src, dst, n); return;
    }
}

float hsum16(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

// ---- fused tile: NR rows × NT tokens, weights decoded in registers ----

// y[j * y_stride + i] = dot(row i, x + j * cols); row i starts at w + i * row_bytes.
template <class Block, int NR, int NT>
void fused_tile(const uint8_t* w, uint64_t row_bytes, const float* x, int64_t cols, float* y, int64_t y_stride) {
    const int64_t n_blocks = cols / Block::kElems;
    alignas(64) float scales[NR][Block::kGroup * Block::kScales];
    __m512 acc[NR][NT];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
    // Decode streams the weights from memory once, and a tile's compute is shorter than a DRAM access:
    // each row's block is prefetched (into L2) `ahead` bytes before it is used: the same position one
    // tile later for long rows, several tiles later for short ones. (The rows of a tile are consecutive,
    // so the tiles of a task form one contiguous stream.)
    const int64_t ahead = std::max<int64_t>(kPrefetchBytes, static_cast<int64_t>(NR * row_bytes));
    // A group of blocks at a time: the scales of all NR rows, then the products.
    for (int64_t g = 0; g < n_blocks; g += Block::kGroup) {
        const int64_t n_group = std::min<int64_t>(Block::kGroup, n_blocks - g);
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i) Block::prepare(w + i * row_bytes + g * Block::kBytes, n_group, scales[i]);
        for (int64_t b = 0; b < n_group; ++b) {
            const float* xb = x + (g + b) * Block::kElems;
            for_steps(std::make_integer_sequence<int, Block::kSteps>{}, [&](auto step) {
                // This step's activation chunks, loaded once for all rows.
                constexpr int c0 = step.value * Block::kStepChunks;
                __m512 xs[NT][Block::kStepChunks];
#pragma GCC unroll 16
                for (int j = 0; j < NT; ++j)
#pragma GCC unroll 16
                    for (int c = 0; c < Block::kStepChunks; ++c)
                        xs[j][c] = _mm512_loadu_ps(xb + j * cols + 16 * (c0 + c));
#pragma GCC unroll 16
                for (int i = 0; i < NR; ++i) {
                    const uint8_t* src = w + i * row_bytes + (g + b) * Block::kBytes;
                    if (Block::kBytes > 64 || step.value == 0) {  // a line per 64 bytes of block, at least one
                        _mm_prefetch(reinterpret_cast<const char*>(src) + ahead + 64 * step.value, _MM_HINT_T0);
                    }
                    Block::template step<step.value>(src, scales[i] + b * Block::kScales, [&](int c, __m512 wv) {
#pragma GCC unroll 16
                        for (int j = 0; j < NT; ++j) {
                            acc[i][j] = _mm512_fmadd_ps(wv, xs[j][c - c0], acc[i][j]);
                        }
                    });
                }
            });
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) y[j * y_stride + i] = hsum16(acc[i][j]);
}

using FusedFn = void (*)(const uint8_t*, uint64_t, const float*, int64_t, float*, int64_t);

template <class Block, int NT>
FusedFn fused_for_rows(int nr) {
    switch (nr) {
        case 1: return &fused_tile<Block, 1, NT>;
        case 2: return &fused_tile<Block, 2, NT>;
        case 3: return &fused_tile<Block, 3, NT>;
        case 4: return &fused_tile<Block, 4, NT>;
        case 5: return &fused_tile<Block, 5, NT>;
        case 6: return &fused_tile<Block, 6, NT>;
        case 7: return &fused_tile<Block, 7, NT>;
        default: return &fused_tile<Block, 8, NT>;
    }
}

template <class Block>
FusedFn fused_for(int nr, int nt) {
    static_assert(kFusedMaxTokens == 3);
    switch (nt) {
        case 1: return fused_for_rows<Block, 1>(nr);
        case 2: return fused_for_rows<Block, 2>(std::min(nr, 4));
        default: return fused_for_rows<Block, 3>(std::min(nr, 4));
    }
}

template <class Block>
void fused_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const int nt = static_cast<int>(a.n_tokens);
    const int tile_rows = nt == 1 ? Block::kRowsOneToken : kFusedRows;
    const FusedFn full = fused_for<Block>(tile_rows, nt);
    int64_t r = row_begin;
    for (; r + tile_rows <= row_end; r += tile_rows) {
        full(a.W + static_cast<uint64_t>(r) * a.row_bytes, a.row_bytes, a.X, a.cols, a.Y + r, a.y_stride);
    }
    if (r < row_end) {
        fused_for<Block>(static_cast<int>(row_end - r), nt)(a.W + static_cast<uint64_t>(r) * a.row_bytes, a.row_bytes,
                                                            a.X, a.cols, a.Y + r, a.y_stride);
    }
}

// The block-quantized types have a fused tile; the plain float types take the buffered path whatever the
// token count.
bool has_fused_tile(TensorType type) {
    return type != TensorType::F32 && type != TensorType::F16 && type != TensorType::BF16;
}

void run_fused(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    switch (a.type) {
        case TensorType::Q8_0: fused_rows<Q8_0>(a, row_begin, row_end); return;
        case TensorType::Q4_0: fused_rows<Q4_0>(a, row_begin, row_end); return;
        case TensorType::Q4_1: fused_rows<Q4_1>(a, row_begin, row_end); return;
        case TensorType::Q4_K: fused_rows<Q45_K<false>>(a, row_begin, row_end); return;
        case TensorType::Q5_K: fused_rows<Q45_K<true>>(a, row_begin, row_end); return;
        case TensorType::Q6_K: fused_rows<Q6_K>(a, row_begin, row_end); return;
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: return;  // has_fused_tile is false
    }
}

// ---- buffered tile: NR decoded f32 rows × NT tokens ----

// Columns [k_begin, k_end) of y[j * y_stride + i] = dot(w[i], x + j * cols) for i < NR, j < NT: the
// accumulators start at zero for k_begin = 0, else from `park` (where the previous slice left them), and
// are summed into y after the last slice (k_end = cols), else parked. Parking a vector is exact, so the
// FMA sequence of every output is the same as in one pass over all columns; slicing keeps the row
// tile's slice (NR × 2 KiB) in L1 while the token tiles stream past it.
template <int NR, int NT>
void tile(const float* const* w, const float* x, int64_t cols, int64_t k_begin, int64_t k_end, __m512* park, float* y,
          int64_t y_stride) {
    __m512 acc[NR][NT];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j)
            acc[i][j] =
                k_begin == 0 ? _mm512_setzero_ps() : _mm512_load_ps(reinterpret_cast<const float*>(park + i * NT + j));
    int64_t k = k_begin;
    for (; k + 16 <= k_end; k += 16) {
        __m512 wv[NR];
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i) wv[i] = _mm512_loadu_ps(w[i] + k);
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
            const __m512 xv = _mm512_loadu_ps(x + j * cols + k);
#pragma GCC unroll 16
            for (int i = 0; i < NR; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k < k_end) {  // a partial last chunk (k_end = cols)
        const __mmask16 mask = static_cast<__mmask16>((1u << (k_end - k)) - 1);
        __m512 wv[NR];
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i) wv[i] = _mm512_maskz_loadu_ps(mask, w[i] + k);
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
            const __m512 xv = _mm512_maskz_loadu_ps(mask, x + j * cols + k);
#pragma GCC unroll 16
            for (int i = 0; i < NR; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k_end < cols) {
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
            for (int j = 0; j < NT; ++j) _mm512_store_ps(reinterpret_cast<float*>(park + i * NT + j), acc[i][j]);
        return;
    }
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) y[j * y_stride + i] = hsum16(acc[i][j]);
}

using TileFn = void (*)(const float* const*, const float*, int64_t, int64_t, int64_t, __m512*, float*, int64_t);

template <int NR>
TileFn tile_for_tokens(int nt) {
    static_assert(kTokenTile == 6);
    switch (nt) {
        case 1: return &tile<NR, 1>;
        case 2: return &tile<NR, 2>;
        case 3: return &tile<NR, 3>;
        case 4: return &tile<NR, 4>;
        case 5: return &tile<NR, 5>;
        default: return &tile<NR, 6>;
    }
}

TileFn tile_fn(int nr, int nt) {
    static_assert(kRowTile == 4);
    switch (nr) {
        case 1: return tile_for_tokens<1>(nt);
        case 2: return tile_for_tokens<2>(nt);
        case 3: return tile_for_tokens<3>(nt);
        default: return tile_for_tokens<4>(nt);
    }
}

void buffered_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const bool direct = a.type == TensorType::F32;  // f32 rows are used in place
    thread_local std::vector<float> decoded;        // kRowTile × cols, per worker
    if (!direct && decoded.size() < static_cast<size_t>(kRowTile * a.cols)) {
        decoded.resize(static_cast<size_t>(kRowTile * a.cols));
    }
    const float* w[kRowTile];
    // Each token tile's accumulators between column slices.
    alignas(64) __m512 park[(kTokenBlock + kTokenTile - 1) / kTokenTile][kRowTile * kTokenTile];
    // Tokens per pass over a decoded row tile: as many as keep their activations (token_block × cols
    // floats) within kActivationBlockBytes, so that they stay in L2, up to kTokenBlock.
    const int64_t fit = kActivationBlockBytes / (4 * std::max<int64_t>(a.cols, 1)) / kTokenTile * kTokenTile;
    const int64_t token_block = std::clamp<int64_t>(fit, kTokenTile, kTokenBlock);
    // Column slices of about kColumnSlice, equal (whole 16-column chunks), one for short rows.
    const int64_t n_slices = std::max<int64_t>(1, a.cols / kColumnSlice);
    const int64_t slice = ((a.cols + n_slices - 1) / n_slices + 15) / 16 * 16;
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += token_block) {
        const int64_t t_end = std::min(a.n_tokens, t0 + token_block);
        for (int64_t r = row_begin; r < row_end; r += kRowTile) {
            const int nr = static_cast<int>(std::min<int64_t>(kRowTile, row_end - r));
            for (int i = 0; i < nr; ++i) {
                const uint8_t* src = a.W + static_cast<uint64_t>(r + i) * a.row_bytes;
                if (direct) {
                    w[i] = reinterpret_cast<const float*>(src);
                } else {
                    float* dst = decoded.data() + i * a.cols;
                    decode_row(a.type, src, dst, a.cols);
                    w[i] = dst;
                }
            }
            for (int64_t k0 = 0; k0 < a.cols; k0 += slice) {
                const int64_t k1 = std::min(a.cols, k0 + slice);
                int tile_index = 0;
                for (int64_t t = t0; t < t_end; t += kTokenTile, ++tile_index) {
                    const int nt = static_cast<int>(std::min<int64_t>(kTokenTile, t_end - t));
                    tile_fn(nr, nt)(w, a.X + t * a.cols, a.cols, k0, k1, park[tile_index], a.Y + t * a.y_stride + r,
                                    a.y_stride);
                }
            }
        }
    }
}

}  // namespace

void matmul_rows_avx512(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.n_tokens <= kFusedChunkedMaxTokens && has_fused_tile(a.type)) {
        // Up to 3 tokens (decode) the fused tile at once; a few more (continuous batching of a few
        // sequences) in chunks of up to 3, the task's rows re-read from L2 per chunk, which beats
        // decoding them into the buffer (its decode is amortized only over many tokens). Same bits.
        for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kFusedMaxTokens) {
            MatmulArgs chunk = a;
            chunk.X = a.X + t0 * a.cols;
            chunk.Y = a.Y + t0 * a.y_stride;
            chunk.n_tokens = std::min<int64_t>(kFusedMaxTokens, a.n_tokens - t0);
            run_fused(chunk, row_begin, row_end);
        }
        return;
    }
    buffered_rows(a, row_begin, row_end);
}

}  // namespace kvstash::kernels
