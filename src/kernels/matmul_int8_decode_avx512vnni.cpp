// AVX-512 VNNI integer-activation matmul, one or two tokens (decode): bitwise equal to the scalar
// definition (reference/matmul_int8_ref.cpp) and to the many-token path (matmul_int8_avx512vnni.cpp).
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "kernels/matmul_int8_avx512vnni.h"

#include <algorithm>

namespace kvstash::kernels::int8_avx512 {
namespace {

// ---- few tokens (decode): natural layout, row sums by a reduction tree ----
// For each row the products of a block group (a pair of 32-element blocks, or one K-quant super-block)
// are computed with vpdpbusd on the weights as they lie in the row (no unpacked copy), into a vector V
// whose lanes 0-7 sum to one integer and lanes 8-15 to another: S of blocks b and b+1 (both planes
// already combined, 256·V_h + V_l, which fits int32 for 32-element blocks), or S_h and S_l of the
// super-block (combined after the tree in int64), plus a second vector for the K-quant mins M_b. The
// 16 rows' vectors are then summed lane-group-wise by a tree of vpermt2d + vpaddd into two vectors with
// lane = row, and the float steps of the definition run on them. The integers are exact, so the result
// is bitwise that of the unpacked path and of the scalar code.

// Indices of tree level L (R = 2^L rows per input vector, P = 8 / R partial sums per row and group):
// output lane g·8 + row'·(P/2) + p' = input[g·8 + (row' mod R)·P + 2p'] + input[... + 1], rows row' < R
// from the first input, the others from the second (index bit 4).
struct TreeIndex {
    int32_t even[3][16] = {}, odd[3][16] = {};
    constexpr TreeIndex() {
        for (int level = 0; level < 3; ++level) {
            const int R = 1 << level, P = 8 / R, P2 = P / 2;
            for (int lane = 0; lane < 16; ++lane) {
                const int g = lane / 8, k = lane % 8, row = k / P2, p = k % P2;
                const int src = (row < R ? 0 : 16) + g * 8 + (row % R) * P + 2 * p;
                even[level][lane] = src;
                odd[level][lane] = src + 1;
            }
        }
    }
};

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

// v[r] (r < 16): row r's vector. Returns group 0 (lanes 0-7 summed) and group 1 (8-15) with lane = row.
__attribute__((always_inline)) inline void reduce_rows(__m512i* v, __m512i& group0, __m512i& group1) {
    static constexpr TreeIndex kIdx;
    int n = 16;
    for (int level = 0; level < 3; ++level, n /= 2) {
        const __m512i e = _mm512_loadu_si512(kIdx.even[level]), o = _mm512_loadu_si512(kIdx.odd[level]);
        for (int i = 0; i < n / 2; ++i) {
            v[i] = _mm512_add_epi32(_mm512_permutex2var_epi32(v[2 * i], e, v[2 * i + 1]),
                                    _mm512_permutex2var_epi32(v[2 * i], o, v[2 * i + 1]));
        }
    }
    // v[0]: rows 0-7 (lanes g·8 + row), v[1]: rows 8-15.
    group0 = _mm512_permutex2var_epi32(
        v[0], _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23), v[1]);
    group1 = _mm512_permutex2var_epi32(
        v[0], _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31), v[1]);
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

// One instantiation per type (constant block layout; the 16-row loop unrolled so that the rows' vectors
// stay in registers for the reduction tree).
template <int NT, TensorType type>
void few_small(const uint8_t* w, uint64_t row_bytes, int nr, int64_t cols, const QuantizedActivations& xa, int64_t t0,
               float* y, int64_t y_stride) {
    constexpr int bytes = type == TensorType::Q4_0 ? 18 : type == TensorType::Q4_1 ? 20 : 34;
    constexpr int shift = type == TensorType::Q4_0 ? 3 : type == TensorType::Q8_0 ? 7 : 0;
    const int64_t n_blocks = cols / 32;
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
    const int64_t ahead = prefetch_distance(row_bytes);
    const bool to_l1 = ahead <= kPrefetchL1Bytes;
    // q4_0 / q4_1: byte i of the weight vector takes quant byte i % 16 of block i / 32.
    const int off = type == TensorType::Q4_1 ? 4 : 2;
    alignas(64) int8_t spread_bytes[64];
    for (int i = 0; i < 64; ++i) spread_bytes[i] = static_cast<int8_t>((i / 32) * bytes + off + i % 16);
    const __m512i spread = _mm512_load_si512(spread_bytes);
    const __m512i nibble_shift = _mm512_setr_epi32(0, 0, 0, 0, 0x00040004, 0x00040004, 0x00040004, 0x00040004, 0, 0, 0,
                                                   0, 0x00040004, 0x00040004, 0x00040004, 0x00040004);
    const __m512i low4z = _mm512_set1_epi8(0x0F);
    // Masks for the q4_0 / q4_1 masked loads (2 × 18 or 2 × 20 bytes); q8_0's pair (68 bytes) does not use
    // them, and shifting a 64-bit mask by 64 or more would be undefined.
    const auto low_bytes = [](int n) { return n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1; };
    const __mmask64 one_mask = low_bytes(bytes), pair_mask = low_bytes(2 * bytes);
    __m512 acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; b += 2) {
        const bool pair = b + 1 < n_blocks;
        __m512i x_h[NT], x_l[NT], init_h[NT], init_l[NT];
        for (int j = 0; j < NT; ++j) {
            const int8_t* ph = xa.h_row(t0 + j) + 32 * b;
            const int8_t* pl = xa.l_row(t0 + j) + 32 * b;
            x_h[j] = pair ? _mm512_loadu_si512(ph) : _mm512_zextsi256_si512(load256(reinterpret_cast<const uint8_t*>(ph)));
            x_l[j] = pair ? _mm512_loadu_si512(pl) : _mm512_zextsi256_si512(load256(reinterpret_cast<const uint8_t*>(pl)));
            const int32_t* h32 = xa.h32_row(t0 + j) + b;
            const int32_t* l32 = xa.l32_row(t0 + j) + b;
            init_h[j] = init_l[j] = _mm512_setzero_si512();
            if constexpr (shift != 0) {
                init_h[j] = _mm512_mask_set1_epi32(init_h[j], 1, -(h32[0] << shift));
                init_l[j] = _mm512_mask_set1_epi32(init_l[j], 1, -(l32[0] << shift));
                if (pair) {
                    init_h[j] = _mm512_mask_set1_epi32(init_h[j], 1 << 8, -(h32[1] << shift));
                    init_l[j] = _mm512_mask_set1_epi32(init_l[j], 1 << 8, -(l32[1] << shift));
                }
            }
        }
        __m512i v[NT][kRows];
        alignas(64) int32_t head[2][kRows];  // the first dword (d, or d and m) of blocks b, b+1 of each row
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r) {
            const uint8_t* blk = w + static_cast<uint64_t>(std::min(r, nr - 1)) * row_bytes + b * bytes;
            // Two blocks are 36-68 bytes: a line at the start, and for q8_0 one at the end of the pair.
            prefetch(blk + ahead, to_l1);
            if constexpr (2 * bytes > 64) prefetch(blk + ahead + 2 * bytes - 1, to_l1);
            head[0][r] = load_i32(blk);
            head[1][r] = pair ? load_i32(blk + bytes) : 0;
            __m512i wv;
            if constexpr (type == TensorType::Q8_0) {
                const __m256i lo = _mm256_xor_si256(load256(blk + 2), bias);
                wv = pair ? join(lo, _mm256_xor_si256(load256(blk + 36), bias)) : _mm512_zextsi256_si512(lo);
            } else {
                // Both blocks' bytes in one masked load (never past them), each block's 16 quant bytes
                // copied to two 128-bit lanes (vpermb), shifted by 0 / 4 bits and masked: the 2 × 32
                // nibbles in element order.
                const __m512i raw = _mm512_maskz_loadu_epi8(pair ? pair_mask : one_mask, blk);
                wv = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi8(spread, raw), nibble_shift), low4z);
            }
            for (int j = 0; j < NT; ++j) {
                v[j][r] = _mm512_add_epi32(_mm512_slli_epi32(_mm512_dpbusd_epi32(init_h[j], wv, x_h[j]), 8),
                                           _mm512_dpbusd_epi32(init_l[j], wv, x_l[j]));
            }
        }
        const __m512i h0 = _mm512_load_si512(head[0]), h1 = _mm512_load_si512(head[1]);
        const __m512 d0 = low_half_fp16(h0), d1 = low_half_fp16(h1);
        for (int j = 0; j < NT; ++j) {
            __m512i s0, s1;
            reduce_rows(v[j], s0, s1);
            const float* dx = xa.d_row(t0 + j) + b;
            const int32_t* h32 = xa.h32_row(t0 + j) + b;
            const int32_t* l32 = xa.l32_row(t0 + j) + b;
            acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d0, _mm512_set1_ps(dx[0])), _mm512_cvtepi32_ps(s0), acc[j]);
            if constexpr (type == TensorType::Q4_1) {
                const float sx = dx[0] * static_cast<float>(256 * h32[0] + l32[0]);
                acc[j] = _mm512_fmadd_ps(high_half_fp16(h0), _mm512_set1_ps(sx), acc[j]);
            }
            if (pair) {
                acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d1, _mm512_set1_ps(dx[1])), _mm512_cvtepi32_ps(s1), acc[j]);
                if constexpr (type == TensorType::Q4_1) {
                    const float sx = dx[1] * static_cast<float>(256 * h32[1] + l32[1]);
                    acc[j] = _mm512_fmadd_ps(high_half_fp16(h1), _mm512_set1_ps(sx), acc[j]);
                }
            }
        }
    }
    const auto mask = static_cast<__mmask16>((1u << nr) - 1);
    for (int j = 0; j < NT; ++j) _mm512_mask_storeu_ps(y + (t0 + j) * y_stride, mask, acc[j]);
}

// q4_K / q5_K: scales (lanes 0-7) and mins (lanes 8-15) of a super-block as int32 (ggml's unpacking of
// the 12 scale bytes, as in matmul_avx512.cpp).
inline __m512i k_scales_mins(const uint8_t* blk) {
    uint32_t u[3];
    std::memcpy(u, blk + 4, 12);
    constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
    const __m128i packed = _mm_setr_epi32(static_cast<int>(u[0] & kLow6),
                                          static_cast<int>((u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4)),
                                          static_cast<int>(u[1] & kLow6),
                                          static_cast<int>(((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4)));
    return _mm512_cvtepu8_epi32(packed);
}

template <int NT>
void few_k(TensorType type, const uint8_t* w, uint64_t row_bytes, int nr, int64_t cols, const QuantizedActivations& xa,
           int64_t t0, float* y, int64_t y_stride) {
    const bool q6 = type == TensorType::Q6_K, five = type == TensorType::Q5_K;
    const int bytes = static_cast<int>(tensor_type_traits(type).type_size);
    const int64_t n_blocks = cols / 256;
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30), sixteen = _mm256_set1_epi8(16);
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    const int64_t ahead = prefetch_distance(row_bytes);
    const bool to_l1 = ahead <= kPrefetchL1Bytes;
    __m512 acc[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        // Activation side: the four 64-element vectors of each plane, and the sums the offsets / mins
        // need: q6_K: -32 · (each plane's sums of 16), one per scale; q4_K / q5_K: the sums of q over 32
        // (256 h + l) in lanes 8-15, to multiply with the mins.
        __m512i xh[NT][4], xl[NT][4], oh[NT], ol[NT];
        for (int j = 0; j < NT; ++j) {
            const int8_t* ph = xa.h_row(t0 + j) + 256 * b;
            const int8_t* pl = xa.l_row(t0 + j) + 256 * b;
            for (int g = 0; g < 4; ++g) {
                xh[j][g] = _mm512_loadu_si512(ph + 64 * g);
                xl[j][g] = _mm512_loadu_si512(pl + 64 * g);
            }
            if (q6) {
                oh[j] = _mm512_slli_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(xa.h16_row(t0 + j) + 16 * b)), 5);
                ol[j] = _mm512_slli_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(xa.l16_row(t0 + j) + 16 * b)), 5);
            } else {
                const __m256i h32 = load256(reinterpret_cast<const uint8_t*>(xa.h32_row(t0 + j) + 8 * b));
                const __m256i l32 = load256(reinterpret_cast<const uint8_t*>(xa.l32_row(t0 + j) + 8 * b));
                oh[j] = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_add_epi32(_mm256_slli_epi32(h32, 8), l32), 1);
                ol[j] = _mm512_setzero_si512();
            }
        }
        __m512i v2[kFewTokensMax][kRows];  // q4_K / q5_K: the mins' products (lanes 0-7)
        __m512i v[NT][kRows];
        for (int r = 0; r < kRows; ++r) {
            const uint8_t* blk = w + static_cast<uint64_t>(std::min(r, nr - 1)) * row_bytes + b * bytes;
            for (int l = 0; l < bytes; l += 64) prefetch(blk + ahead + l, to_l1);
            __m512i wv[4], scale_of[4], extra;
            if (q6) {
                const __m512i sc = _mm512_cvtepi8_epi32(load128(blk + 192));  // signed scales j = 0..15
                const __m512i scw = _mm512_and_si512(sc, low16);            // as int16 with a zero high half
                for (int h = 0; h < 2; ++h) {
                    const __m256i ql0 = load256(blk + 64 * h), ql1 = load256(blk + 64 * h + 32);
                    const __m256i qh = load256(blk + 128 + 32 * h);
                    const __m256i o0 = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
                    const __m256i o1 = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
                    const __m256i o2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45));
                    const __m256i o3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
                    wv[2 * h] = join(o0, o1);
                    wv[2 * h + 1] = join(o2, o3);
                }
                // Vector g covers sub-blocks 4g .. 4g+3, four lanes (16 elements) each.
                for (int g = 0; g < 4; ++g) {
                    scale_of[g] = _mm512_permutexvar_epi32(
                        _mm512_add_epi32(_mm512_set1_epi32(4 * g),
                                         _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)),
                        scw);
                }
                extra = sc;
            } else {
                const __m512i scm = k_scales_mins(blk);  // high halves zero
                const __m256i qh = five ? load256(blk + 16) : _mm256_setzero_si256();
                const uint8_t* qs = blk + (five ? 48 : 16);
                for (int g = 0; g < 4; ++g) {
                    const __m256i q = load256(qs + 32 * g);
                    __m256i lo = _mm256_and_si256(q, low4);
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
                    if (five) {
                        const __m256i bit_lo = _mm256_set1_epi8(static_cast<char>(1 << (2 * g)));
                        const __m256i bit_hi = _mm256_set1_epi8(static_cast<char>(1 << (2 * g + 1)));
                        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_lo), bit_lo), sixteen));
                        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_hi), bit_hi), sixteen));
                    }
                    wv[g] = join(lo, hi);
                    scale_of[g] = _mm512_permutexvar_epi32(
                        _mm512_setr_epi32(2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g + 1, 2 * g + 1,
                                          2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1),
                        scm);
                }
                extra = scm;
            }
            for (int j = 0; j < NT; ++j) {
                // Per lane: 4 products (|.| <= 4 · 63 · 128 < 2^15), times the sub-block's scale; per plane.
                __m512i s_h = _mm512_setzero_si512(), s_l = _mm512_setzero_si512();
                for (int g = 0; g < 4; ++g) {
                    s_h = _mm512_dpwssd_epi32(s_h, _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[g], xh[j][g]), scale_of[g]);
                    s_l = _mm512_dpwssd_epi32(s_l, _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[g], xl[j][g]), scale_of[g]);
                }
                if (q6) {
                    // + sum_j sc_j · (-32 · sum16_j) per plane: any lanes, the tree sums them all.
                    s_h = _mm512_add_epi32(s_h, _mm512_mullo_epi32(extra, oh[j]));
                    s_l = _mm512_add_epi32(s_l, _mm512_mullo_epi32(extra, ol[j]));
                } else {
                    const __m512i mins = _mm512_mullo_epi32(extra, oh[j]);  // lanes 8-15: m_j · sum32_j
                    v2[j][r] = _mm512_zextsi256_si512(_mm512_extracti64x4_epi64(mins, 1));
                }
                v[j][r] = join(_mm256_add_epi32(_mm512_castsi512_si256(s_h), _mm512_extracti64x4_epi64(s_h, 1)),
                               _mm256_add_epi32(_mm512_castsi512_si256(s_l), _mm512_extracti64x4_epi64(s_l, 1)));
            }
        }
        const __m512i head = gather_rows(w, row_bytes, nr, b * bytes + (q6 ? 206 : 0));
        const __m512 d = q6 ? high_half_fp16(head) : low_half_fp16(head);
        const __m512 dmin = high_half_fp16(head);
        for (int j = 0; j < NT; ++j) {
            __m512i s_h, s_l;
            reduce_rows(v[j], s_h, s_l);
            const __m512 x_scale = _mm512_set1_ps(xa.d_row(t0 + j)[b]);
            acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, x_scale), combine_planes_wide(s_h, s_l), acc[j]);
            if (!q6) {
                __m512i m, unused;
                reduce_rows(v2[j], m, unused);
                acc[j] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, x_scale), _mm512_cvtepi32_ps(m), acc[j]);
            }
        }
    }
    const auto mask = static_cast<__mmask16>((1u << nr) - 1);
    for (int j = 0; j < NT; ++j) _mm512_mask_storeu_ps(y + (t0 + j) * y_stride, mask, acc[j]);
}

template <int NT>
void few_tokens(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const bool k = tensor_type_traits(a.type).block_size == 256;
    for (int64_t r = row_begin; r < row_end; r += kRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kRows, row_end - r));
        const uint8_t* w = a.W + static_cast<uint64_t>(r) * a.row_bytes;
        if (k) {
            few_k<NT>(a.type, w, a.row_bytes, nr, a.cols, *a.xq, 0, a.Y + r, a.y_stride);
        } else if (a.type == TensorType::Q8_0) {
            few_small<NT, TensorType::Q8_0>(w, a.row_bytes, nr, a.cols, *a.xq, 0, a.Y + r, a.y_stride);
        } else if (a.type == TensorType::Q4_1) {
            few_small<NT, TensorType::Q4_1>(w, a.row_bytes, nr, a.cols, *a.xq, 0, a.Y + r, a.y_stride);
        } else {
            few_small<NT, TensorType::Q4_0>(w, a.row_bytes, nr, a.cols, *a.xq, 0, a.Y + r, a.y_stride);
        }
    }
}

}  // namespace

void few_tokens_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    static_assert(kFewTokensMax == 2);
    if (a.n_tokens == 1) {
        few_tokens<1>(a, row_begin, row_end);
    } else {
        few_tokens<2>(a, row_begin, row_end);
    }
}

}  // namespace kvstash::kernels::int8_avx512
