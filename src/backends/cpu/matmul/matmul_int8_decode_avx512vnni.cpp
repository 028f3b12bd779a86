// AVX-512 VNNI integer-activation matmul, few tokens (decode): bitwise equal to the scalar definition
// (reference/matmul_int8_ref.cpp) and to the many-token tiles (matmul_int8_avx512_tiles.h). The products
// of 32-element blocks here, the K-quants' in matmul_int8_decode_kquant_avx512vnni.cpp; the scheme in
// matmul_int8_decode_avx512vnni.h.
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/matmul_int8_decode_avx512vnni.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/matmul/matmul_int8_few_avx512vnni.h"

namespace kvstash::kernels::int8_avx512 {
namespace {

// One instantiation per type (constant block layout; the 16-row loop unrolled so that the rows' vectors
// stay in registers for the reduction tree).
template <int NT, TensorType type>
void decode_tile_blocks32(const uint8_t* w, uint64_t row_bytes, int nr, int64_t cols, const QuantizedActivations& xa,
                          int64_t t0, float* y, int64_t y_stride) {
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
            x_h[j] =
                pair ? _mm512_loadu_si512(ph) : _mm512_zextsi256_si512(load256(reinterpret_cast<const uint8_t*>(ph)));
            x_l[j] =
                pair ? _mm512_loadu_si512(pl) : _mm512_zextsi256_si512(load256(reinterpret_cast<const uint8_t*>(pl)));
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

template <int NT>
void rows_blocks32(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    for (int64_t r = row_begin; r < row_end; r += kRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kRows, row_end - r));
        const uint8_t* w = a.W + static_cast<uint64_t>(r) * a.row_bytes;
        if (a.type == TensorType::Q8_0) {
            decode_tile_blocks32<NT, TensorType::Q8_0>(w, a.row_bytes, nr, a.cols, *a.xq, 0, a.Y + r, a.y_stride);
        } else if (a.type == TensorType::Q4_1) {
            decode_tile_blocks32<NT, TensorType::Q4_1>(w, a.row_bytes, nr, a.cols, *a.xq, 0, a.Y + r, a.y_stride);
        } else {
            decode_tile_blocks32<NT, TensorType::Q4_0>(w, a.row_bytes, nr, a.cols, *a.xq, 0, a.Y + r, a.y_stride);
        }
    }
}

// One or two tokens (a.n_tokens), any integer-path type.
void few_tokens_one_call(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.type == TensorType::Q4_K || a.type == TensorType::Q5_K || a.type == TensorType::Q6_K) {
        decode_rows_super_blocks(a, row_begin, row_end);
    } else {
        decode_rows_blocks32(a, row_begin, row_end);
    }
}

}  // namespace

void decode_rows_blocks32(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.n_tokens == 1) {
        rows_blocks32<1>(a, row_begin, row_end);
    } else {
        rows_blocks32<2>(a, row_begin, row_end);
    }
}

void decode_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    static_assert(kFewTokensMax == 2);
    if (a.n_tokens >= 1 && a.n_tokens <= kFewTokensMax) {
        few_tokens_one_call(a, row_begin, row_end);
        return;
    }
    // 3 .. few_tokens_max(type) tokens: each weight read and unpacked once, then multiplied per token pair
    // (matmul_int8_few_avx512vnni.h); every output is computed exactly as for its token alone.
    few_tokens_rows(a, row_begin, row_end);
}

}  // namespace kvstash::kernels::int8_avx512
