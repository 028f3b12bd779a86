// AVX-512 grouped-query attention over one key chunk (backends/cpu/attention/attention_group.h): the per-row path's
// arithmetic, bitwise, with each K/V row read once per call and no per-key call or reduction. Few heads (a
// decode row's group): scores with 16 keys in the lanes, then per-head numerators and value passes. Many heads
// (prefill tiles: rows × a group, kLaneHeads and more): K and V converted to f32 once, scores with 16 heads in
// the lanes, so that the max, numerators and sums are lane-wise vector operations, and the values walked in
// key blocks that stay in L1 (docs/benchmarks-history.md, "AVX-512 prefill attention").
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>

#include "backends/cpu/attention/attention.h"
#include "backends/cpu/attention/attention_group.h"
#include "backends/cpu/attention/attention_numerator_sums.h"
#include "backends/cpu/attention/attention_rows_f32x16.h"
#include "backends/cpu/attention/kv_row_walk.h"
#include "backends/cpu/exp/exp_f32.h"
#include "backends/cpu/runtime/scratch.h"

namespace kvstash::kernels {
namespace {

constexpr int kKeys = 16;  // keys per score tile

template <bool F16>
inline __m512 load16(const uint8_t* row, int chunk) {
    if constexpr (F16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * chunk)));
    } else {
        return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + 16 * chunk);
    }
}

// r[k] = the horizontal sum of v[k], for 16 vectors at once, with the pairing of lanes of the dot product's
// canonical tree (attention_rows.h: lanes i and i+8, then i and i+4, then i and i+2, then i and i+1;
// float addition is commutative, so only the pairing matters).
inline __m512 hsum16(const __m512 (&v)[kKeys]) {
    __m512 x[8];  // x[i]: lanes 0-7 = v[2i]'s i+(i+8) sums, lanes 8-15 = v[2i+1]'s
    for (int i = 0; i < 8; ++i) {
        const __m512 lo = _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi = _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
        x[i] = _mm512_add_ps(lo, hi);
    }
    __m512 y[4];  // y[i]: 128-bit chunk c = key 4i+c's 4 partial sums (distance 4 added)
    for (int i = 0; i < 4; ++i) {
        const __m512 lo = _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512 hi = _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1));
        y[i] = _mm512_add_ps(lo, hi);
    }
    __m512 z[2];  // z[i], chunk c: [key 8i+c: 2 sums, key 8i+4+c: 2 sums] (distance 2 added)
    for (int i = 0; i < 2; ++i) {
        const __m512 lo = _mm512_shuffle_ps(y[2 * i], y[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi = _mm512_shuffle_ps(y[2 * i], y[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
        z[i] = _mm512_add_ps(lo, hi);
    }
    // w, chunk c: keys c, 4+c, 8+c, 12+c (distance 1 added); put key k in lane k.
    const __m512 lo = _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512 w = _mm512_add_ps(lo, hi);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, w);
}

// Scores of every head against every key: hsum(fma chain over the 16-element chunks) * scale, as the per-row
// dot (attention_rows.h) times the scale.
template <int NC, bool F16>
void scores(const AttentionGroupArgs& a) {
    ScoreTileWalk walk(a.k_blocks, a.v_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key, a.n_keys,
                       static_cast<uint64_t>(a.head_dim) * (F16 ? 2 : 4));
    const __m512 zero = _mm512_setzero_ps();
    const __m512 scale = _mm512_set1_ps(a.scale);
    alignas(64) float tile[kKeys][NC * 16];
    for (int64_t j0 = 0; j0 < a.n_keys; j0 += kKeys) {
        const int n = static_cast<int>(std::min<int64_t>(kKeys, a.n_keys - j0));
        walk.prefetch_tile(j0, n);
        for (int k = 0; k < n; ++k) {
            const uint8_t* row = walk.next_key_row();
            for (int c = 0; c < NC; ++c) _mm512_store_ps(&tile[k][16 * c], load16<F16>(row, c));
        }
        for (int k = n; k < kKeys; ++k) {
            for (int c = 0; c < NC; ++c) _mm512_store_ps(&tile[k][16 * c], zero);
        }
        for (int64_t h = 0; h < a.n_heads; ++h) {
            const float* q = a.q + h * a.head_dim;
            __m512 acc[kKeys];
            for (int k = 0; k < kKeys; ++k) acc[k] = zero;
            for (int c = 0; c < NC; ++c) {
                const __m512 qc = _mm512_loadu_ps(q + 16 * c);
                for (int k = 0; k < kKeys; ++k) acc[k] = _mm512_fmadd_ps(qc, _mm512_load_ps(&tile[k][16 * c]), acc[k]);
            }
            const __m512 s = _mm512_mul_ps(hsum16(acc), scale);
            float* dst = a.scores + h * a.n_keys + j0;
            if (n == kKeys) {
                _mm512_storeu_ps(dst, s);
            } else {
                _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << n) - 1), s);
            }
        }
    }
}

// acc[h] for HB heads from h0 over keys [j_begin, j_end): fma(e_hj, v_j, acc) in key order (the per-row axpy's
// arithmetic), from 0 for the chunk's first key, else continuing from the acc stored after the keys before
// (exact), sharing each V row's load among the heads. v_rows[j]: key j's V slice (of type F16 or f32).
template <int NC, int HB, bool F16>
void values(const AttentionGroupArgs& a, const Numerators& num, const uint8_t* const* v_rows, int64_t h0,
            int64_t j_begin, int64_t j_end) {
    __m512 acc[HB][NC];
    for (int i = 0; i < HB; ++i) {
        const float* from = a.acc + (h0 + i) * a.head_dim;
        for (int c = 0; c < NC; ++c) acc[i][c] = j_begin == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(from + 16 * c);
    }
    const float* e[HB];
    for (int i = 0; i < HB; ++i) e[i] = num.head(h0 + i);
    const int64_t stride = num.key_stride;
    for (int64_t j = j_begin; j < j_end; ++j) {
        const uint8_t* row = v_rows[j];
        __m512 v[NC];
        for (int c = 0; c < NC; ++c) v[c] = load16<F16>(row, c);
        for (int i = 0; i < HB; ++i) {
            const __m512 w = _mm512_set1_ps(e[i][j * stride]);
            for (int c = 0; c < NC; ++c) acc[i][c] = _mm512_fmadd_ps(w, v[c], acc[i][c]);
        }
    }
    for (int i = 0; i < HB; ++i) {
        float* out = a.acc + (h0 + i) * a.head_dim;
        for (int c = 0; c < NC; ++c) _mm512_storeu_ps(out + 16 * c, acc[i][c]);
    }
}

// Every head's values over keys [j_begin, j_end), in passes of up to kHeadsPerPass heads: HB * NC accumulators,
// NC values and a weight in the 32 registers. A pass takes its heads together as far as all of them have keys
// (AttentionGroupArgs::head_keys: the rows of a chunk's diagonal see one key more than the row before), then each
// head alone over the rest of its keys, continuing from its stored accumulators: every head's fmas in key order.
template <int NC, bool F16>
void values_all(const AttentionGroupArgs& a, const Numerators& num, const uint8_t* const* v_rows, int64_t j_begin,
                int64_t j_end) {
    constexpr int kHeadsPerPass = NC <= 4 ? 6 : 2;
    for (int64_t h0 = 0; h0 < a.n_heads; h0 += kHeadsPerPass) {
        const int64_t heads = std::min<int64_t>(kHeadsPerPass, a.n_heads - h0);
        int64_t common = j_end;
        for (int64_t i = 0; i < heads; ++i) common = std::min(common, keys_of(a, h0 + i));
        if (common > j_begin) {
            switch (heads) {
                case 6: values<NC, (kHeadsPerPass >= 6 ? 6 : 1), F16>(a, num, v_rows, h0, j_begin, common); break;
                case 5: values<NC, (kHeadsPerPass >= 5 ? 5 : 1), F16>(a, num, v_rows, h0, j_begin, common); break;
                case 4: values<NC, (kHeadsPerPass >= 4 ? 4 : 1), F16>(a, num, v_rows, h0, j_begin, common); break;
                case 3: values<NC, (kHeadsPerPass >= 3 ? 3 : 1), F16>(a, num, v_rows, h0, j_begin, common); break;
                case 2: values<NC, 2, F16>(a, num, v_rows, h0, j_begin, common); break;
                default: values<NC, 1, F16>(a, num, v_rows, h0, j_begin, common); break;
            }
        }
        if (a.head_keys == nullptr) continue;
        const int64_t rest = std::max(j_begin, common);
        for (int64_t i = 0; i < heads; ++i) {
            const int64_t end = std::min(j_end, keys_of(a, h0 + i));
            if (end > rest) values<NC, 1, F16>(a, num, v_rows, h0 + i, rest, end);
        }
    }
}

// From this many heads (prefill tiles: several query rows of a group share the call), attend_many:
// scores_in_lanes instead of scores + softmax_numerators + numerator_sums (a last block of fewer than 16 heads
// leaves lanes idle), and the chunk's V rows converted to f32 once (exact) instead of once per pass of heads,
// walked in blocks of kValueKeys keys so that a block's converted rows (64 × head_dim f32: 16 KB at head_dim 64)
// stay in L1 across the passes; each accumulator still takes its fmas in key order (the same bits as one pass),
// as in attention_group_avx2.cpp.
constexpr int64_t kLaneHeads = 12;

// Scores, max, numerators and sums of many heads (prefill tiles) with 16 heads in the lanes of a vector: key j's
// scores of heads 16b.. are hsum16 of the 16 heads' fma chains * scale, the same fmas and the same
// reduction as `scores` (which puts 16 keys of one head in the lanes), so the same bits; the max over keys, the
// numerators exp_f32(s - max) (elementwise, as exp_f32_shifted_row_avx512) and their sums in key order from 0 are
// then lane-wise vector operations (simd::softmax_numerators_in_lanes), with no per-head chain of scalar additions.
// The numerators go to e[(b * n_keys + j) * 16 + lane]; k_f32: the chunk's K rows converted to f32 (n_keys ×
// head_dim).
template <int NC>
void scores_in_lanes(const AttentionGroupArgs& a, const float* k_f32, float* e) {
    const __m512 zero = _mm512_setzero_ps();
    const __m512 scale = _mm512_set1_ps(a.scale);
    const int64_t n_blocks = (a.n_heads + 15) / 16;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const int lanes = static_cast<int>(std::min<int64_t>(16, a.n_heads - 16 * b));
        // The block's query vectors at fixed offsets (lanes past the last head: zeros, their results never stored).
        alignas(64) float q[16 * NC * 16];
        for (int i = 0; i < 16; ++i) {
            for (int c = 0; c < NC; ++c) {
                _mm512_store_ps(q + (i * NC + c) * 16,
                                i < lanes ? _mm512_loadu_ps(a.q + (16 * b + i) * a.head_dim + 16 * c) : zero);
            }
        }
        float* eb = e + b * a.n_keys * 16;
        __m512 m = _mm512_set1_ps(-INFINITY);
        for (int64_t j = 0; j < a.n_keys; ++j) {
            const float* k = k_f32 + j * a.head_dim;
            __m512 kc[NC];
            for (int c = 0; c < NC; ++c) kc[c] = _mm512_load_ps(k + 16 * c);
            __m512 acc[16];
            for (int i = 0; i < 16; ++i) {
                acc[i] = zero;
                for (int c = 0; c < NC; ++c)
                    acc[i] = _mm512_fmadd_ps(_mm512_load_ps(q + (i * NC + c) * 16), kc[c], acc[i]);
            }
            const __m512 s = _mm512_mul_ps(hsum16(acc), scale);
            m = _mm512_max_ps(m, s);
            _mm512_store_ps(eb + 16 * j, s);
        }
        simd::softmax_numerators_in_lanes(eb, a.n_keys, simd::F32x16{m}, lanes, a.max_score + 16 * b, a.sum + 16 * b);
    }
}

constexpr int64_t kValueKeys = 64;
constexpr int64_t kMaxKeys = 256;
static_assert(kMaxKeys >= kAttentionChunkKeys, "a chunk's V row pointers fit v_rows");

// Many heads: K and V rows converted to f32 once, scores_in_lanes, the values in key blocks.
template <int NC, bool F16>
void attend_many(const AttentionGroupArgs& a, const uint8_t* const* v_rows) {
    thread_local ScratchArray k_scratch, v_scratch, e_scratch;
    float* k_f32 = k_scratch.floats(static_cast<size_t>(a.n_keys * a.head_dim));
    float* v_f32 = v_scratch.floats(static_cast<size_t>(a.n_keys * a.head_dim));
    const int64_t n_blocks = (a.n_heads + 15) / 16;
    float* e = e_scratch.floats(static_cast<size_t>(n_blocks * a.n_keys * 16));
    RowCursor k_cursor(a.k_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key);
    const uint8_t* f32_rows[kMaxKeys];
    for (int64_t j = 0; j < a.n_keys; ++j) {
        const uint8_t* k_row = k_cursor.next();
        for (int c = 0; c < NC; ++c) {
            _mm512_store_ps(k_f32 + j * a.head_dim + 16 * c, load16<F16>(k_row, c));
            _mm512_store_ps(v_f32 + j * a.head_dim + 16 * c, load16<F16>(v_rows[j], c));
        }
        f32_rows[j] = reinterpret_cast<const uint8_t*>(v_f32 + j * a.head_dim);
    }
    scores_in_lanes<NC>(a, k_f32, e);
    const Numerators num{e, a.n_keys * 16, a.n_keys, 16};
    for (int64_t j0 = 0; j0 < a.n_keys; j0 += kValueKeys) {
        values_all<NC, false>(a, num, f32_rows, j0, std::min(a.n_keys, j0 + kValueKeys));
    }
}

template <int NC, bool F16>
void attend(const AttentionGroupArgs& a) {
    const uint8_t* v_rows[kMaxKeys];  // the chunk's V rows, in key order
    RowCursor cursor(a.v_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key);
    for (int64_t j = 0; j < a.n_keys; ++j) v_rows[j] = cursor.next();
    // (Heads of different key counts, the rows of a chunk's diagonal: the per-head softmax below, not the lanes.)
    if (a.n_heads >= kLaneHeads && a.head_keys == nullptr) {
        attend_many<NC, F16>(a, v_rows);
        return;
    }
    scores<NC, F16>(a);
    for (int64_t h = 0; h < a.n_heads; ++h)
        simd::softmax_numerators(a.scores + h * a.n_keys, keys_of(a, h), a.max_score + h);
    all_numerator_sums(a);
    values_all<NC, F16>(a, Numerators{a.scores, 0, a.n_keys, 1}, v_rows, 0, a.n_keys);
}

template <bool F16>
void attend_type(const AttentionGroupArgs& a) {
    switch (a.head_dim / 16) {
        case 1: attend<1, F16>(a); break;
        case 2: attend<2, F16>(a); break;
        case 3: attend<3, F16>(a); break;
        case 4: attend<4, F16>(a); break;
        case 5: attend<5, F16>(a); break;
        case 6: attend<6, F16>(a); break;
        case 7: attend<7, F16>(a); break;
        default: attend<8, F16>(a); break;
    }
}

}  // namespace

void attention_group_avx512(const AttentionGroupArgs& args) {
    if (args.type == TensorType::F16) {
        attend_type<true>(args);
    } else {
        attend_type<false>(args);
    }
}

}  // namespace kvstash::kernels
