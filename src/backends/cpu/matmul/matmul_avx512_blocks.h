// The AVX-512 weight decoders of the f32-activation matmul (matmul_avx512.cpp). Decoded weights are bitwise
// dequantize_row's values (see the per-type notes below).
//
// Include only from *_avx512.cpp files, after `#pragma GCC optimize("fp-contract=off")` (the decode
// arithmetic exactly as written, never fused implicitly). Its functions have internal linkage (an
// unnamed namespace), as when they lived in one file: each including file inlines its own copies.
#pragma once

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

#include "backends/cpu/matmul/matmul_impl.h"

namespace kvstash::kernels {
namespace {

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

[[maybe_unused]] void decode_f16(const uint8_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i))));
    }
    for (; i < n; ++i) dst[i] = load_fp16(src + 2 * i);  // the tail, with the same conversion
}

[[maybe_unused]] void decode_bf16(const uint8_t* src, float* dst, int64_t n) {
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

[[maybe_unused]] void decode_row(TensorType type, const uint8_t* src, float* dst, int64_t n) {
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

[[maybe_unused]] float hsum16(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

}  // namespace
}  // namespace kvstash::kernels
