// AVX-512 VNNI integer-activation matmul, a few tokens, the K-quants (q4_K, q5_K, q6_K): each super-block of a
// 16-row tile unpacked once, then multiplied with every token (scheme in matmul_int8_few_avx512vnni.h; the
// products, their bounds and the float steps are decode_tile_q45_k's and decode_tile_q6_k's,
// matmul_int8_decode_kquant_avx512vnni.cpp). Bitwise equal to the scalar definition
// (reference/matmul_int8_ref.cpp).
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include <algorithm>
#include <vector>

#include "backends/cpu/matmul/matmul_int8_few_avx512vnni.h"
#include "backends/cpu/matmul/matmul_int8_kquant_avx512vnni.h"
#include "backends/cpu/runtime/scratch.h"

namespace kvstash::kernels::int8_avx512 {
namespace {

// ---- q4_K / q5_K ----

// A super-block of 16 rows, unpacked (8 KiB): per row its 4 weight vectors and scale pairs, the rows' mins
// as word pairs per sub-block, d and dmin with lane = row.
struct Q45KSuperBlock {
    __m512i w[kRows][4], scale[kRows][4];
    __m512i min_pair[8];
    __m512 d, dmin;
};

template <bool kFive>
void unpack_q45_k(const uint8_t* const* rows, int64_t off, int64_t ahead, bool to_l1, Q45KSuperBlock& out) {
    constexpr int bytes = kFive ? 176 : 144;
    Q45KHeaders hdr;
    load_q45_k_headers(rows, off, hdr);
    for (int s = 0; s < 8; ++s) out.min_pair[s] = min_pairs(hdr, s);
    for (int r = 0; r < kRows; ++r) {
        const uint8_t* blk = rows[r] + off;
        for (int l = 0; l < bytes; l += 64) prefetch(blk + ahead + l, to_l1);
        q45_k_weight_vectors<kFive>(blk, out.w[r]);
        q45_k_scale_pairs(hdr.sc_rows[r], out.scale[r]);
    }
    out.d = low_half_fp16(hdr.head);
    out.dmin = high_half_fp16(hdr.head);
}

// The products of super-block b with tokens t0 .. t0 + NT - 1, added to acc[j] in the definition's order.
// xb: the super-block's arranged activations (arrange_q45_k_activations), token t at xb[t * kQ45KActVectors].
template <int NT, bool kFive>
__attribute__((always_inline)) inline void q45_k_tokens(const Q45KSuperBlock& sb, const Vec64* xb,
                                                        const QuantizedActivations& xa, int64_t t0, int64_t b,
                                                        __m512* acc) {
    // Where per-lane sums stop being summable in int32: after the D = 2 step (q4_K) or the D = 1 step (q5_K).
    constexpr bool split_early = kFive;
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    __m512i mins[NT];
    for (int j = 0; j < NT; ++j) {
        mins[j] = _mm512_setzero_si512();
        const uint8_t* x_pairs = xb[(t0 + j) * kQ45KActVectors + 8].b;
        for (int s = 0; s < 8; ++s) {
            mins[j] = _mm512_dpwssd_epi32(mins[j], sb.min_pair[s], _mm512_set1_epi32(load_i32(x_pairs + 4 * s)));
        }
    }
    __m512i part_hi[NT][4], part_lo[NT][4];
    for (int q = 0; q < 4; ++q) {
        __m512i v[NT][4];
        for (int i = 0; i < 4; ++i) {
            const int r = 4 * q + i;
            for (int j = 0; j < NT; ++j) {
                v[j][i] = q45_k_row_products(sb.w[r], sb.scale[r], xb + (t0 + j) * kQ45KActVectors);
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
    for (int j = 0; j < NT; ++j) {
        const __m512i hi =
            pair_step<8>(pair_step<4>(part_hi[j][0], part_hi[j][1]), pair_step<4>(part_hi[j][2], part_hi[j][3]));
        const __m512i lo =
            pair_step<8>(pair_step<4>(part_lo[j][0], part_lo[j][1]), pair_step<4>(part_lo[j][2], part_lo[j][3]));
        const __m512 x_scale = _mm512_set1_ps(xa.d_row(t0 + j)[b]);
        __m512 a = acc[j];
        a = _mm512_fmadd_ps(_mm512_mul_ps(sb.d, x_scale), combine_split(hi, lo), a);
        a = _mm512_fnmadd_ps(_mm512_mul_ps(sb.dmin, x_scale), _mm512_cvtepi32_ps(mins[j]), a);
        acc[j] = a;
    }
}

template <bool kFive>
void few_tile_q45_k(const uint8_t* w, uint64_t row_bytes, int nr, int64_t cols, const QuantizedActivations& xa,
                    const Vec64* act, int64_t n_tokens, __m512* acc, float* y, int64_t y_stride) {
    constexpr int bytes = kFive ? 176 : 144;
    const int64_t n_blocks = cols / 256;
    const int64_t ahead = prefetch_distance(row_bytes);
    const bool to_l1 = ahead <= kPrefetchL1Bytes;
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<uint64_t>(std::min(r, nr - 1)) * row_bytes;
    for (int64_t j = 0; j < n_tokens; ++j) acc[j] = _mm512_setzero_ps();
    Q45KSuperBlock sb;
    for (int64_t b = 0; b < n_blocks; ++b) {
        unpack_q45_k<kFive>(rows, b * bytes, ahead, to_l1, sb);
        const Vec64* xb = act + b * n_tokens * kQ45KActVectors;
        int64_t t = 0;
        for (; t + 2 <= n_tokens; t += 2) q45_k_tokens<2, kFive>(sb, xb, xa, t, b, acc + t);
        if (t < n_tokens) q45_k_tokens<1, kFive>(sb, xb, xa, t, b, acc + t);
    }
    const auto mask = static_cast<__mmask16>((1u << nr) - 1);
    for (int64_t j = 0; j < n_tokens; ++j) _mm512_mask_storeu_ps(y + j * y_stride, mask, acc[j]);
}

// ---- q6_K ----

// A super-block of 16 rows, unpacked (9 KiB): per row its 4 weight vectors, the scale words and the pairs
// (-sc_j, -sc_j) (q6_k_row_vectors); d with lane = row.
struct Q6KSuperBlock {
    __m512i w[kRows][4], scale[kRows][4], neg_scale_pairs[kRows];
    __m512 d;
};

template <int NT>
__attribute__((always_inline)) inline void q6_k_tokens(const Q6KSuperBlock& sb, const QuantizedActivations& xa,
                                                       int64_t t0, int64_t b, __m512* acc) {
    __m512i oh[NT], ol[NT];
    for (int j = 0; j < NT; ++j) {
        oh[j] = q6_k_offset_pairs(xa.h16_row(t0 + j) + 16 * b);
        ol[j] = q6_k_offset_pairs(xa.l16_row(t0 + j) + 16 * b);
    }
    __m512i part[NT][4];
    for (int q = 0; q < 4; ++q) {
        __m512i v[NT][4];
        for (int i = 0; i < 4; ++i) {
            const int r = 4 * q + i;
            for (int j = 0; j < NT; ++j) {
                v[j][i] = q6_k_row_products(sb.w[r], sb.scale[r], sb.neg_scale_pairs[r], oh[j], ol[j],
                                            xa.h_row(t0 + j) + 256 * b, xa.l_row(t0 + j) + 256 * b);
            }
        }
        for (int j = 0; j < NT; ++j) {
            part[j][q] = pair_step<2>(pair_step<1>(v[j][0], v[j][1]), pair_step<1>(v[j][2], v[j][3]));
        }
    }
    for (int j = 0; j < NT; ++j) {
        // Rows 0-7 (lane = row, plane h in lanes 0-7, l in 8-15) and rows 8-15.
        const __m512i lo8 = pair_step<4>(part[j][0], part[j][1]), hi8 = pair_step<4>(part[j][2], part[j][3]);
        const __m512i s_h = _mm512_shuffle_i64x2(lo8, hi8, _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i s_l = _mm512_shuffle_i64x2(lo8, hi8, _MM_SHUFFLE(3, 2, 3, 2));
        const __m512 x_scale = _mm512_set1_ps(xa.d_row(t0 + j)[b]);
        acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(sb.d, x_scale), combine_planes_wide(s_h, s_l), acc[j]);
    }
}

void few_tile_q6_k(const uint8_t* w, uint64_t row_bytes, int nr, int64_t cols, const QuantizedActivations& xa,
                   int64_t n_tokens, __m512* acc, float* y, int64_t y_stride) {
    constexpr int bytes = 210;
    const int64_t n_blocks = cols / 256;
    const int64_t ahead = prefetch_distance(row_bytes);
    const bool to_l1 = ahead <= kPrefetchL1Bytes;
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<uint64_t>(std::min(r, nr - 1)) * row_bytes;
    for (int64_t j = 0; j < n_tokens; ++j) acc[j] = _mm512_setzero_ps();
    Q6KSuperBlock sb;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t off = b * bytes;
        for (int r = 0; r < kRows; ++r) {
            const uint8_t* blk = rows[r] + off;
            for (int l = 0; l < bytes; l += 64) prefetch(blk + ahead + l, to_l1);
            q6_k_row_vectors(blk, sb.w[r], sb.scale[r], sb.neg_scale_pairs[r]);
        }
        sb.d = high_half_fp16(gather_rows(w, row_bytes, nr, off + 206));
        int64_t t = 0;
        for (; t + 2 <= n_tokens; t += 2) q6_k_tokens<2>(sb, xa, t, b, acc + t);
        if (t < n_tokens) q6_k_tokens<1>(sb, xa, t, b, acc + t);
    }
    const auto mask = static_cast<__mmask16>((1u << nr) - 1);
    for (int64_t j = 0; j < n_tokens; ++j) _mm512_mask_storeu_ps(y + j * y_stride, mask, acc[j]);
}

}  // namespace

void few_tokens_rows_super_blocks(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    thread_local std::vector<Vec64> act;
    thread_local ScratchArray acc_buf;
    auto* acc = reinterpret_cast<__m512*>(acc_buf.floats(static_cast<size_t>(a.n_tokens * kRows)));
    if (a.type == TensorType::Q4_K || a.type == TensorType::Q5_K) arrange_q45_k_activations(*a.xq, a.n_tokens, act);
    for (int64_t r = row_begin; r < row_end; r += kRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kRows, row_end - r));
        const uint8_t* w = a.W + static_cast<uint64_t>(r) * a.row_bytes;
        if (a.type == TensorType::Q4_K) {
            few_tile_q45_k<false>(w, a.row_bytes, nr, a.cols, *a.xq, act.data(), a.n_tokens, acc, a.Y + r, a.y_stride);
        } else if (a.type == TensorType::Q5_K) {
            few_tile_q45_k<true>(w, a.row_bytes, nr, a.cols, *a.xq, act.data(), a.n_tokens, acc, a.Y + r, a.y_stride);
        } else {
            few_tile_q6_k(w, a.row_bytes, nr, a.cols, *a.xq, a.n_tokens, acc, a.Y + r, a.y_stride);
        }
    }
}

}  // namespace kvstash::kernels::int8_avx512
