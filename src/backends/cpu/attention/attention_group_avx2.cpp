// AVX2 grouped-query attention of one query row over one key chunk (backends/cpu/attention/attention_group.h): the
// per-row operations' arithmetic (attention_rows.h: the same on every ISA), bitwise, with each K/V row read and
// converted (from f16, or from q8_0 as d * q) once per group and no per-key call. Few heads (a decode row's group):
// scores with 8 keys in the lanes, then per-head numerators and value passes. Many heads (prefill tiles: rows × a
// group, kLaneHeads and more): K and V converted to f32 once, scores with 16 heads in the lanes of a simd::F32x16, each
// lane one head's dot product in the canonical order (its 16 fma chains, then the tree as lane-wise additions: no
// horizontal work per key), so that the max, numerators and sums are lane-wise too, and the values walked in key
// blocks that stay in L1. Heads may start at different keys of the chunk (AttentionGroupArgs::head_first: the rows of a
// sliding-window layer whose windows start in it): each block of 16 lanes walks the keys its heads see, -inf where a
// head sees none, and each head's values run over its own keys.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/attention/attention.h"
#include "backends/cpu/attention/attention_group.h"
#include "backends/cpu/attention/attention_numerator_sums.h"
#include "backends/cpu/attention/attention_q8_0_avx2.h"
#include "backends/cpu/attention/attention_rows_f32x16.h"
#include "backends/cpu/attention/kv_row_walk.h"
#include "backends/cpu/exp/exp_f32.h"
#include "backends/cpu/runtime/scratch.h"

namespace kvstash::kernels {
namespace {

constexpr int kKeys = 8;         // keys per score tile
constexpr int kMaxVectors = 64;  // head_dim / 8 at most (head_dim <= 512)
constexpr int kMaxKeys = 256;    // keys per chunk at most
static_assert(kMaxKeys >= kAttentionChunkKeys, "a chunk's V row pointers fit v_rows");

template <TensorType T>
constexpr uint64_t slice_bytes(int64_t head_dim) {
    if constexpr (T == TensorType::F16) {
        return static_cast<uint64_t>(head_dim) * 2;
    } else if constexpr (T == TensorType::Q8_0) {
        return static_cast<uint64_t>(head_dim / 32) * 34;
    } else {
        return static_cast<uint64_t>(head_dim) * 4;
    }
}

template <TensorType T>
inline __m256 load8(const uint8_t* row, int64_t vec) {
    if constexpr (T == TensorType::F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * vec)));
    } else if constexpr (T == TensorType::Q8_0) {
        return load8_q8_0(row, 8 * vec);
    } else {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + 8 * vec);
    }
}

// r[k] = the horizontal sum of v[k] for 8 vectors at once, with the last three levels of the dot product's
// canonical tree (attention_rows.h): lanes i and i+4, then i and i+2, then 0 and 1 (float addition is
// commutative: only the pairing matters).
inline __m256 hsum8(const __m256 (&v)[kKeys]) {
    __m256 x[4];  // x[i]: lanes 0-3 = v[2i]'s (i, i+4) sums, lanes 4-7 = v[2i+1]'s
    for (int i = 0; i < 4; ++i) {
        const __m256 lo = _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20);
        const __m256 hi = _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31);
        x[i] = _mm256_add_ps(lo, hi);
    }
    __m256 y[2];  // y[i], per 128-bit half: [key a: (0,2) (1,3) sums, key c: the same]
    for (int i = 0; i < 2; ++i) {
        const __m256 lo = _mm256_shuffle_ps(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
        const __m256 hi = _mm256_shuffle_ps(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
        y[i] = _mm256_add_ps(lo, hi);
    }
    // w: lanes = keys 0, 2, 4, 6, 1, 3, 5, 7; put key k in lane k.
    const __m256 lo = _mm256_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 hi = _mm256_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1));
    const __m256 w = _mm256_add_ps(lo, hi);
    return _mm256_permutevar8x32_ps(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Scores of every head against every key of the chunk: the per-row dot (attention_rows.h) times the scale. Its 16
// lanes are two fma chains per key, lo (lanes 0-7: elements 16c..16c+7) and hi (lanes 8-15: 16c+8..16c+15; none
// for a last half vector), added lane-wise (the tree's first level), then hsum8's levels for 8 keys at once. The
// keys of a tile in two halves of 4: 8 chains, 2 query vectors and a K operand fit the 16 registers.
template <TensorType T>
void scores(const AttentionGroupArgs& a) {
    ScoreTileWalk walk(a.k_blocks, a.v_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key, a.n_keys,
                       slice_bytes<T>(a.head_dim));
    const int64_t nv = a.head_dim / 8;
    const __m256 zero = _mm256_setzero_ps();
    const __m256 scale = _mm256_set1_ps(a.scale);
    alignas(32) float tile[kKeys][kMaxVectors * 8];
    for (int64_t j0 = 0; j0 < a.n_keys; j0 += kKeys) {
        const int n = static_cast<int>(std::min<int64_t>(kKeys, a.n_keys - j0));
        walk.prefetch_tile(j0, n);
        for (int k = 0; k < n; ++k) {
            const uint8_t* row = walk.next_key_row();
            for (int64_t c = 0; c < nv; ++c) _mm256_store_ps(&tile[k][8 * c], load8<T>(row, c));
        }
        for (int k = n; k < kKeys; ++k) {
            for (int64_t c = 0; c < nv; ++c) _mm256_store_ps(&tile[k][8 * c], zero);
        }
        for (int64_t h = 0; h < a.n_heads; ++h) {
            const float* q = a.q + h * a.head_dim;
            __m256 sums[kKeys];
            for (int k0 = 0; k0 < kKeys; k0 += 4) {
                __m256 lo[4] = {zero, zero, zero, zero}, hi[4] = {zero, zero, zero, zero};
                int64_t c = 0;
                for (; c + 2 <= nv; c += 2) {
                    const __m256 q_lo = _mm256_loadu_ps(q + 8 * c);
                    const __m256 q_hi = _mm256_loadu_ps(q + 8 * c + 8);
                    for (int k = 0; k < 4; ++k) {
                        lo[k] = _mm256_fmadd_ps(q_lo, _mm256_load_ps(&tile[k0 + k][8 * c]), lo[k]);
                        hi[k] = _mm256_fmadd_ps(q_hi, _mm256_load_ps(&tile[k0 + k][8 * c + 8]), hi[k]);
                    }
                }
                if (c < nv) {
                    const __m256 q_lo = _mm256_loadu_ps(q + 8 * c);
                    for (int k = 0; k < 4; ++k)
                        lo[k] = _mm256_fmadd_ps(q_lo, _mm256_load_ps(&tile[k0 + k][8 * c]), lo[k]);
                }
                for (int k = 0; k < 4; ++k) sums[k0 + k] = _mm256_add_ps(lo[k], hi[k]);
            }
            const __m256 s = _mm256_mul_ps(hsum8(sums), scale);
            float* dst = a.scores + h * a.n_keys + j0;
            if (n == kKeys) {
                _mm256_storeu_ps(dst, s);
            } else {
                alignas(32) float tmp[kKeys];
                _mm256_store_ps(tmp, s);
                for (int k = 0; k < n; ++k) dst[k] = tmp[k];
            }
        }
    }
}

// The many-heads path's scores, 16 heads in the lanes: qt holds a block's 16 query vectors transposed (element i of
// the head in lane l at qt[16 * i + l]), k one key's row in f32.

// The 8 × 8 floats of r transposed (r[i][j] becomes r[j][i]): data movement only.
inline void transpose8x8(__m256 (&r)[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; ++i) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

// qt for the heads 16b.. of the call (lanes past the last head: +0, their results never stored), by 8 × 8 transposes.
void transpose_queries(const AttentionGroupArgs& a, int64_t b, float* qt) {
    for (int64_t half = 0; half < 2; ++half) {
        const int64_t h0 = 16 * b + 8 * half;
        for (int64_t i0 = 0; i0 < a.head_dim; i0 += 8) {
            __m256 r[8];
            for (int64_t l = 0; l < 8; ++l) {
                r[l] = h0 + l < a.n_heads ? _mm256_loadu_ps(a.q + (h0 + l) * a.head_dim + i0) : _mm256_setzero_ps();
            }
            transpose8x8(r);
            for (int64_t i = 0; i < 8; ++i) _mm256_store_ps(qt + 16 * (i0 + i) + 8 * half, r[i]);
        }
    }
}

// (a_l + a_{l+8}) + (a_{l+4} + a_{l+12}) for l < 4: four lanes' fma chains of the canonical dot product (lane i: p =
// fma(q[e], k[e], p) over the elements e = i, i + 16, ... < head_dim, from +0) and the first two levels of its tree,
// for 16 heads at once. Eight independent chains of ymm fmas, one broadcast K element per two of them.
inline simd::F32x16 dot_quarter(const float* qt, const float* k, int64_t head_dim, int64_t l) {
    using simd::fma, simd::load, simd::set1;
    simd::F32x16 a0 = simd::zero(), a4 = a0, a8 = a0, a12 = a0;
    int64_t e = l;
    for (const int64_t end = l + head_dim / 16 * 16; e < end; e += 16) {
        a0 = fma(load(qt + 16 * e), set1(k[e]), a0);
        a4 = fma(load(qt + 16 * (e + 4)), set1(k[e + 4]), a4);
        a8 = fma(load(qt + 16 * (e + 8)), set1(k[e + 8]), a8);
        a12 = fma(load(qt + 16 * (e + 12)), set1(k[e + 12]), a12);
    }
    if (e < head_dim) {  // head_dim = 16n + 8: the last 8 elements are lanes 0-7's
        a0 = fma(load(qt + 16 * e), set1(k[e]), a0);
        a4 = fma(load(qt + 16 * (e + 4)), set1(k[e + 4]), a4);
    }
    return simd::add(simd::add(a0, a8), simd::add(a4, a12));
}

// One key's dot products with the 16 heads: the tree's last two levels on the quarters (lanes 0 + 2 and 1 + 3, then
// the two sums).
inline simd::F32x16 dot_in_lanes(const float* qt, const float* k, int64_t head_dim) {
    const simd::F32x16 d0 = simd::add(dot_quarter(qt, k, head_dim, 0), dot_quarter(qt, k, head_dim, 2));
    const simd::F32x16 d1 = simd::add(dot_quarter(qt, k, head_dim, 1), dot_quarter(qt, k, head_dim, 3));
    return simd::add(d0, d1);
}

// s in the lanes whose head sees key j (first <= j < count: AttentionGroupArgs::head_first, head_keys), -inf in the
// others.
inline simd::F32x16 seen_or_minus_inf(simd::F32x16 s, simd::F32x16 first, simd::F32x16 count, int64_t j) {
    const __m256 key = _mm256_set1_ps(static_cast<float>(j));
    const __m256 none = _mm256_set1_ps(-INFINITY);
    const __m256 seen_lo =
        _mm256_and_ps(_mm256_cmp_ps(key, count.lo, _CMP_LT_OQ), _mm256_cmp_ps(key, first.lo, _CMP_GE_OQ));
    const __m256 seen_hi =
        _mm256_and_ps(_mm256_cmp_ps(key, count.hi, _CMP_LT_OQ), _mm256_cmp_ps(key, first.hi, _CMP_GE_OQ));
    return {_mm256_blendv_ps(none, s.lo, seen_lo), _mm256_blendv_ps(none, s.hi, seen_hi)};
}

// Scores, max, numerators and sums of every head, 16 heads in the lanes: key j's scores of heads 16b.. are
// dot_in_lanes * scale (the per-row dot's fmas and tree, so its bits), the max over the keys each head sees, then
// simd::softmax_numerators_in_lanes. A block walks only the keys its heads see (from the first any of them sees to the
// last): keys [first_of(h), keys_of(h)) of head h's numerators go to e[(b * n_keys + j) * 16 + lane], the others are
// left as they were. k_rows[j]: key j's row in f32.
void scores_in_lanes(const AttentionGroupArgs& a, const float* const* k_rows, float* e) {
    thread_local ScratchArray qt_scratch;
    float* qt = qt_scratch.floats(static_cast<size_t>(16 * a.head_dim));
    const simd::F32x16 scale = simd::set1(a.scale);
    for (int64_t b = 0; b * 16 < a.n_heads; ++b) {
        const int64_t lanes = std::min<int64_t>(16, a.n_heads - 16 * b);
        transpose_queries(a, b, qt);
        // The block's keys [begin, end); [common_begin, common_end): those every head of it sees (rows of a chunk's
        // diagonal see fewer keys, rows whose sliding window starts in the chunk see later ones). Idle lanes see every
        // key (their results are not stored).
        int64_t begin = a.n_keys, end = 0, common_begin = 0, common_end = a.n_keys;
        alignas(32) float first[16], count[16];
        for (int64_t l = 0; l < 16; ++l) {
            int64_t f = 0, n = a.n_keys;
            if (l < lanes) {
                f = first_of(a, 16 * b + l);
                n = keys_of(a, 16 * b + l);
                begin = std::min(begin, f);
                end = std::max(end, n);
                common_begin = std::max(common_begin, f);
                common_end = std::min(common_end, n);
            }
            first[l] = static_cast<float>(f);
            count[l] = static_cast<float>(n);
        }
        const simd::F32x16 firsts = simd::load(first), counts = simd::load(count);
        float* eb = e + b * a.n_keys * 16;
        simd::F32x16 m = simd::set1(-INFINITY);
        for (int64_t j = begin; j < end; ++j) {
            simd::F32x16 s = simd::mul(dot_in_lanes(qt, k_rows[j], a.head_dim), scale);
            if (j < common_begin || j >= common_end) s = seen_or_minus_inf(s, firsts, counts, j);
            m = simd::max(m, s);
            simd::store(eb + 16 * j, s);
        }
        simd::softmax_numerators_in_lanes(eb + 16 * begin, end - begin, m, lanes, a.max_score + 16 * b, a.sum + 16 * b);
    }
}

// Keys [begin, end) of the chunk (indices from its first key).
struct KeyRange {
    int64_t begin;
    int64_t end;
};

// acc[h][d] for d in [8 * v0, 8 * (v0 + SV)), HB heads from h0: fma(e_hj, v_jd, acc) over the keys in
// order, from 0 (the per-row axpy's arithmetic), sharing each V load among the heads. Over the keys of
// `keys` only, continuing the chain from the acc stored after the keys before (+0 before a head's first key: attend
// zeroes acc). The HB × SV accumulators, and the HB weights or the SV value vectors (whichever are fewer), stay in the
// 16 AVX2 registers.
template <int SV, int HB, TensorType T>
void values_slice(const AttentionGroupArgs& a, const Numerators& num, const uint8_t* const* v_rows, int64_t h0,
                  int64_t v0, KeyRange keys) {
    __m256 acc[HB][SV];
    for (int i = 0; i < HB; ++i) {
        const float* from = a.acc + (h0 + i) * a.head_dim + 8 * v0;
        for (int c = 0; c < SV; ++c) acc[i][c] = _mm256_loadu_ps(from + 8 * c);
    }
    const float* e[HB];
    for (int i = 0; i < HB; ++i) e[i] = num.head(h0 + i);
    const int64_t stride = num.key_stride;
    for (int64_t j = keys.begin; j < keys.end; ++j) {
        const uint8_t* row = v_rows[j];
        if constexpr (HB <= SV) {
            __m256 w[HB];
            for (int i = 0; i < HB; ++i) w[i] = _mm256_broadcast_ss(e[i] + j * stride);
            for (int c = 0; c < SV; ++c) {
                const __m256 v = load8<T>(row, v0 + c);
                for (int i = 0; i < HB; ++i) acc[i][c] = _mm256_fmadd_ps(w[i], v, acc[i][c]);
            }
        } else {
            __m256 v[SV];
            for (int c = 0; c < SV; ++c) v[c] = load8<T>(row, v0 + c);
            for (int i = 0; i < HB; ++i) {
                const __m256 w = _mm256_broadcast_ss(e[i] + j * stride);
                for (int c = 0; c < SV; ++c) acc[i][c] = _mm256_fmadd_ps(w, v[c], acc[i][c]);
            }
        }
    }
    for (int i = 0; i < HB; ++i) {
        float* out = a.acc + (h0 + i) * a.head_dim + 8 * v0;
        for (int c = 0; c < SV; ++c) _mm256_storeu_ps(out + 8 * c, acc[i][c]);
    }
}

// values_slice for the two shapes that fill the registers (HB × SV = 12: 3 heads × 4 vectors for a decode
// row's group of 3, 6 heads × 2 vectors for prefill tiles), with the 12 accumulators as named variables:
// GCC 12 keeps an array of them in registers but also stores every element to the stack on every key,
// which made the loop store-bound. The same fmas in the same order as values_slice.
template <int HB, int SV, TensorType T>
void values_slice12(const AttentionGroupArgs& a, const Numerators& num, const uint8_t* const* v_rows, int64_t h0,
                    int64_t v0, KeyRange keys) {
    static_assert((HB == 3 && SV == 4) || (HB == 6 && SV == 2), "12 accumulators");
    __m256 r[12];
    for (int i = 0; i < HB; ++i) {
        const float* from = a.acc + (h0 + i) * a.head_dim + 8 * v0;
        for (int c = 0; c < SV; ++c) {
            r[HB == 3 ? 3 * c + i : 2 * i + c] = _mm256_loadu_ps(from + 8 * c);
        }
    }
    __m256 r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3], r4 = r[4], r5 = r[5];
    __m256 r6 = r[6], r7 = r[7], r8 = r[8], r9 = r[9], r10 = r[10], r11 = r[11];
    const float* e[HB];  // head h0 + i's numerator of key j at e[i] + j * stride
    for (int i = 0; i < HB; ++i) e[i] = num.head(h0 + i);
    const int64_t stride = num.key_stride;
    for (int64_t j = keys.begin; j < keys.end; ++j) {
        const uint8_t* row = v_rows[j];
        const int64_t at = j * stride;
        if constexpr (HB == 3) {
            // r[3c + i]: head i, vector c.
            const __m256 w0 = _mm256_broadcast_ss(e[0] + at);
            const __m256 w1 = _mm256_broadcast_ss(e[1] + at);
            const __m256 w2 = _mm256_broadcast_ss(e[2] + at);
            __m256 v = load8<T>(row, v0);
            r0 = _mm256_fmadd_ps(w0, v, r0);
            r1 = _mm256_fmadd_ps(w1, v, r1);
            r2 = _mm256_fmadd_ps(w2, v, r2);
            v = load8<T>(row, v0 + 1);
            r3 = _mm256_fmadd_ps(w0, v, r3);
            r4 = _mm256_fmadd_ps(w1, v, r4);
            r5 = _mm256_fmadd_ps(w2, v, r5);
            v = load8<T>(row, v0 + 2);
            r6 = _mm256_fmadd_ps(w0, v, r6);
            r7 = _mm256_fmadd_ps(w1, v, r7);
            r8 = _mm256_fmadd_ps(w2, v, r8);
            v = load8<T>(row, v0 + 3);
            r9 = _mm256_fmadd_ps(w0, v, r9);
            r10 = _mm256_fmadd_ps(w1, v, r10);
            r11 = _mm256_fmadd_ps(w2, v, r11);
        } else {
            // r[2i + c]: head i, vector c.
            const __m256 va = load8<T>(row, v0);
            const __m256 vb = load8<T>(row, v0 + 1);
            __m256 w = _mm256_broadcast_ss(e[0] + at);
            r0 = _mm256_fmadd_ps(w, va, r0);
            r1 = _mm256_fmadd_ps(w, vb, r1);
            w = _mm256_broadcast_ss(e[1] + at);
            r2 = _mm256_fmadd_ps(w, va, r2);
            r3 = _mm256_fmadd_ps(w, vb, r3);
            w = _mm256_broadcast_ss(e[2] + at);
            r4 = _mm256_fmadd_ps(w, va, r4);
            r5 = _mm256_fmadd_ps(w, vb, r5);
            w = _mm256_broadcast_ss(e[3] + at);
            r6 = _mm256_fmadd_ps(w, va, r6);
            r7 = _mm256_fmadd_ps(w, vb, r7);
            w = _mm256_broadcast_ss(e[4] + at);
            r8 = _mm256_fmadd_ps(w, va, r8);
            r9 = _mm256_fmadd_ps(w, vb, r9);
            w = _mm256_broadcast_ss(e[5] + at);
            r10 = _mm256_fmadd_ps(w, va, r10);
            r11 = _mm256_fmadd_ps(w, vb, r11);
        }
    }
    const __m256 result[12] = {r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11};
    for (int i = 0; i < HB; ++i) {
        float* out = a.acc + (h0 + i) * a.head_dim + 8 * v0;
        for (int c = 0; c < SV; ++c) _mm256_storeu_ps(out + 8 * c, result[HB == 3 ? 3 * c + i : 2 * i + c]);
    }
}

// HB heads from h0, head_dim in slices of SV vectors and a shorter last one.
template <int HB, int SV, TensorType T>
void values_heads(const AttentionGroupArgs& a, const Numerators& num, const uint8_t* const* v_rows, int64_t h0,
                  KeyRange keys) {
    static_assert(SV <= 4, "the last slice has at most 3 vectors");
    const int64_t nv = a.head_dim / 8;
    int64_t v0 = 0;
    for (; v0 + SV <= nv; v0 += SV) {
        if constexpr (HB * SV == 12) {
            values_slice12<HB, SV, T>(a, num, v_rows, h0, v0, keys);
        } else {
            values_slice<SV, HB, T>(a, num, v_rows, h0, v0, keys);
        }
    }
    switch (nv - v0) {
        case 3: values_slice<3, HB, T>(a, num, v_rows, h0, v0, keys); break;
        case 2: values_slice<2, HB, T>(a, num, v_rows, h0, v0, keys); break;
        case 1: values_slice<1, HB, T>(a, num, v_rows, h0, v0, keys); break;
        default: break;
    }
}

// HB heads from h0 over the keys of `keys` that each sees (first_of..keys_of): each head alone before the keys all of
// them see, then together, then each alone after (rows of a chunk's diagonal, whose key counts differ by one from row
// to row; rows whose sliding windows start in the chunk, one key later from row to row). Every head's keys in order.
template <int HB, int SV, TensorType T>
void values_block(const AttentionGroupArgs& a, const Numerators& num, const uint8_t* const* v_rows, int64_t h0,
                  KeyRange keys) {
    int64_t common_begin = keys.begin, common_end = keys.end;
    for (int i = 0; i < HB; ++i) {
        common_begin = std::max(common_begin, first_of(a, h0 + i));
        common_end = std::min(common_end, keys_of(a, h0 + i));
    }
    if (common_begin >= common_end) {  // no key that all of them see
        for (int i = 0; i < HB; ++i) {
            const int64_t begin = std::max(keys.begin, first_of(a, h0 + i));
            const int64_t end = std::min(keys.end, keys_of(a, h0 + i));
            if (begin < end) values_heads<1, 4, T>(a, num, v_rows, h0 + i, KeyRange{begin, end});
        }
        return;
    }
    for (int i = 0; i < HB; ++i) {
        const int64_t begin = std::max(keys.begin, first_of(a, h0 + i));
        if (begin < common_begin) values_heads<1, 4, T>(a, num, v_rows, h0 + i, KeyRange{begin, common_begin});
    }
    values_heads<HB, SV, T>(a, num, v_rows, h0, KeyRange{common_begin, common_end});
    for (int i = 0; i < HB; ++i) {
        const int64_t end = std::min(keys.end, keys_of(a, h0 + i));
        if (common_end < end) values_heads<1, 4, T>(a, num, v_rows, h0 + i, KeyRange{common_end, end});
    }
}

// Every head's values over the keys of `keys` (the shapes below); num: where the numerators are.
template <TensorType T>
void values_all(const AttentionGroupArgs& a, const Numerators& num, const uint8_t* const* v_rows, KeyRange keys) {
    // Many heads (prefill tiles: rows × a group): 6 heads × 2 vectors, one V load per 12 fmas; else 3 heads ×
    // 4 vectors (a decode row's GQA group of 3 in one pass over V per 4 vectors).
    int64_t h0 = 0;
    for (; h0 + 6 <= a.n_heads; h0 += 6) values_block<6, 2, T>(a, num, v_rows, h0, keys);
    for (; h0 + 3 <= a.n_heads; h0 += 3) values_block<3, 4, T>(a, num, v_rows, h0, keys);
    switch (a.n_heads - h0) {
        case 2: values_block<2, 4, T>(a, num, v_rows, h0, keys); break;
        case 1: values_block<1, 4, T>(a, num, v_rows, h0, keys); break;
        default: break;
    }
}

// From this many heads (prefill: several query rows of a group share the call), attend_many: the chunk's K and V rows
// converted to f32 once (exact), scores_in_lanes (a last block of fewer than 16 heads leaves lanes idle), and the
// values pass walked over the keys in blocks of kValueKeys, so that a block's V rows (64 × head_dim f32: 16 KB at
// head_dim 64) and the heads' numerators stay in L1 across the blocks of heads and slices. Each accumulator still takes
// its fmas in key order (stored and reloaded between blocks, exact): the same bits as one pass.
constexpr int64_t kLaneHeads = 12;
constexpr int64_t kValueKeys = 64;

template <TensorType T>
void attend_many(const AttentionGroupArgs& a, const uint8_t* const* v_rows) {
    thread_local ScratchArray k_scratch, v_scratch, e_scratch;
    const int64_t hd = a.head_dim;
    const bool convert = T != TensorType::F32;
    float* k_f32 = convert ? k_scratch.floats(static_cast<size_t>(a.n_keys * hd)) : nullptr;  // n_keys × head_dim
    float* v_f32 = convert ? v_scratch.floats(static_cast<size_t>(a.n_keys * hd)) : nullptr;
    float* e = e_scratch.floats(static_cast<size_t>((a.n_heads + 15) / 16 * a.n_keys * 16));
    const float* k_rows[kMaxKeys];      // the chunk's K rows in f32
    const uint8_t* f32_rows[kMaxKeys];  // ... and its V rows
    ScoreTileWalk walk(a.k_blocks, a.v_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key, a.n_keys,
                       slice_bytes<T>(hd));
    for (int64_t j0 = 0; j0 < a.n_keys; j0 += kKeys) {
        const int n = static_cast<int>(std::min<int64_t>(kKeys, a.n_keys - j0));
        walk.prefetch_tile(j0, n);
        for (int64_t j = j0; j < j0 + n; ++j) {
            const uint8_t* k_row = walk.next_key_row();
            if constexpr (T == TensorType::F32) {
                k_rows[j] = reinterpret_cast<const float*>(k_row);
                f32_rows[j] = v_rows[j];
            } else {
                float* k = k_f32 + j * hd;
                float* v = v_f32 + j * hd;
                for (int64_t c = 0; c < hd / 8; ++c) {
                    _mm256_store_ps(k + 8 * c, load8<T>(k_row, c));
                    _mm256_store_ps(v + 8 * c, load8<T>(v_rows[j], c));
                }
                k_rows[j] = k;
                f32_rows[j] = reinterpret_cast<const uint8_t*>(v);
            }
        }
    }
    scores_in_lanes(a, k_rows, e);
    const Numerators num{e, a.n_keys * 16, a.n_keys, 16};
    for (int64_t j0 = 0; j0 < a.n_keys; j0 += kValueKeys) {
        values_all<TensorType::F32>(a, num, f32_rows, KeyRange{j0, std::min(a.n_keys, j0 + kValueKeys)});
    }
}

template <TensorType T>
void attend(const AttentionGroupArgs& a);

// Heads that start at different keys (AttentionGroupArgs::head_first) on the few-heads path: each run of heads that see
// the same keys as a call of its own (each head's partial depends only on its query and its keys).
template <TensorType T>
void attend_runs(const AttentionGroupArgs& a) {
    for (int64_t h0 = 0; h0 < a.n_heads;) {
        int64_t h1 = h0 + 1;
        while (h1 < a.n_heads && first_of(a, h1) == first_of(a, h0) && keys_of(a, h1) == keys_of(a, h0)) ++h1;
        AttentionGroupArgs run = a;
        run.q = a.q + h0 * a.head_dim;
        run.n_heads = h1 - h0;
        run.first_key = a.first_key + first_of(a, h0);
        run.n_keys = keys_of(a, h0) - first_of(a, h0);
        run.head_keys = nullptr;
        run.head_first = nullptr;
        run.max_score = a.max_score + h0;
        run.sum = a.sum + h0;
        run.acc = a.acc + h0 * a.head_dim;
        attend<T>(run);
        h0 = h1;
    }
}

template <TensorType T>
void attend(const AttentionGroupArgs& a) {
    if (a.head_first != nullptr && a.n_heads < kLaneHeads) {
        attend_runs<T>(a);
        return;
    }
    const uint8_t* v_rows[kMaxKeys];  // the chunk's V rows, in key order
    RowCursor cursor(a.v_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key);
    for (int64_t j = 0; j < a.n_keys; ++j) v_rows[j] = cursor.next();
    std::fill(a.acc, a.acc + a.n_heads * a.head_dim, 0.0f);  // the values' chains start at +0 (values_slice)
    if (a.n_heads >= kLaneHeads) {
        attend_many<T>(a, v_rows);
        return;
    }
    scores<T>(a);
    for (int64_t h = 0; h < a.n_heads; ++h)
        simd::softmax_numerators(a.scores + h * a.n_keys, keys_of(a, h), a.max_score + h);
    all_numerator_sums(a);
    values_all<T>(a, Numerators{a.scores, 0, a.n_keys, 1}, v_rows, KeyRange{0, a.n_keys});
}

}  // namespace

void attention_group_avx2(const AttentionGroupArgs& args) {
    switch (args.type) {
        case TensorType::F16: attend<TensorType::F16>(args); break;
        case TensorType::Q8_0: attend<TensorType::Q8_0>(args); break;
        default: attend<TensorType::F32>(args); break;
    }
}

}  // namespace kvstash::kernels
