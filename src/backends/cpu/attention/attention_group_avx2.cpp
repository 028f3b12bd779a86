// AVX2 grouped-query attention of one query row over one key chunk (backends/cpu/attention/attention_group.h): the
// per-row operations' arithmetic (attention_rows.h: the same on every ISA), bitwise, with each K/V row read and
// converted (from f16, or from q8_0 as d * q) once per group and no per-key call or reduction.
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

// Keys [begin, end) of the chunk (indices from its first key).
struct KeyRange {
    int64_t begin;
    int64_t end;
};

// acc[h][d] for d in [8 * v0, 8 * (v0 + SV)), HB heads from h0: fma(e_hj, v_jd, acc) over the keys in
// order, from 0 (the per-row axpy's arithmetic), sharing each V load among the heads. Over the keys of
// `keys` only: from 0 for the first keys, else continuing the chain from the acc stored after the keys before. The HB ×
// SV accumulators, and the HB weights or the SV value vectors (whichever are fewer), stay in the 16 AVX2 registers.
template <int SV, int HB, TensorType T>
void values_slice(const AttentionGroupArgs& a, const uint8_t* const* v_rows, int64_t h0, int64_t v0, KeyRange keys) {
    __m256 acc[HB][SV];
    for (int i = 0; i < HB; ++i) {
        const float* from = a.acc + (h0 + i) * a.head_dim + 8 * v0;
        for (int c = 0; c < SV; ++c) acc[i][c] = keys.begin == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(from + 8 * c);
    }
    const float* e[HB];
    for (int i = 0; i < HB; ++i) e[i] = a.scores + (h0 + i) * a.n_keys;
    for (int64_t j = keys.begin; j < keys.end; ++j) {
        const uint8_t* row = v_rows[j];
        if constexpr (HB <= SV) {
            __m256 w[HB];
            for (int i = 0; i < HB; ++i) w[i] = _mm256_broadcast_ss(e[i] + j);
            for (int c = 0; c < SV; ++c) {
                const __m256 v = load8<T>(row, v0 + c);
                for (int i = 0; i < HB; ++i) acc[i][c] = _mm256_fmadd_ps(w[i], v, acc[i][c]);
            }
        } else {
            __m256 v[SV];
            for (int c = 0; c < SV; ++c) v[c] = load8<T>(row, v0 + c);
            for (int i = 0; i < HB; ++i) {
                const __m256 w = _mm256_broadcast_ss(e[i] + j);
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
void values_slice12(const AttentionGroupArgs& a, const uint8_t* const* v_rows, int64_t h0, int64_t v0, KeyRange keys) {
    static_assert((HB == 3 && SV == 4) || (HB == 6 && SV == 2), "12 accumulators");
    __m256 r[12];
    for (int i = 0; i < HB; ++i) {
        const float* from = a.acc + (h0 + i) * a.head_dim + 8 * v0;
        for (int c = 0; c < SV; ++c) {
            r[HB == 3 ? 3 * c + i : 2 * i + c] = keys.begin == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(from + 8 * c);
        }
    }
    __m256 r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3], r4 = r[4], r5 = r[5];
    __m256 r6 = r[6], r7 = r[7], r8 = r[8], r9 = r[9], r10 = r[10], r11 = r[11];
    const float* e = a.scores + h0 * a.n_keys;  // head h0 + i's numerators at e + i * n_keys
    const int64_t n_keys = a.n_keys;
    for (int64_t j = keys.begin; j < keys.end; ++j) {
        const uint8_t* row = v_rows[j];
        if constexpr (HB == 3) {
            // r[3c + i]: head i, vector c.
            const __m256 w0 = _mm256_broadcast_ss(e + j);
            const __m256 w1 = _mm256_broadcast_ss(e + n_keys + j);
            const __m256 w2 = _mm256_broadcast_ss(e + 2 * n_keys + j);
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
            __m256 w = _mm256_broadcast_ss(e + j);
            r0 = _mm256_fmadd_ps(w, va, r0);
            r1 = _mm256_fmadd_ps(w, vb, r1);
            w = _mm256_broadcast_ss(e + n_keys + j);
            r2 = _mm256_fmadd_ps(w, va, r2);
            r3 = _mm256_fmadd_ps(w, vb, r3);
            w = _mm256_broadcast_ss(e + 2 * n_keys + j);
            r4 = _mm256_fmadd_ps(w, va, r4);
            r5 = _mm256_fmadd_ps(w, vb, r5);
            w = _mm256_broadcast_ss(e + 3 * n_keys + j);
            r6 = _mm256_fmadd_ps(w, va, r6);
            r7 = _mm256_fmadd_ps(w, vb, r7);
            w = _mm256_broadcast_ss(e + 4 * n_keys + j);
            r8 = _mm256_fmadd_ps(w, va, r8);
            r9 = _mm256_fmadd_ps(w, vb, r9);
            w = _mm256_broadcast_ss(e + 5 * n_keys + j);
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
void values_heads(const AttentionGroupArgs& a, const uint8_t* const* v_rows, int64_t h0, KeyRange keys) {
    static_assert(SV <= 4, "the last slice has at most 3 vectors");
    const int64_t nv = a.head_dim / 8;
    int64_t v0 = 0;
    for (; v0 + SV <= nv; v0 += SV) {
        if constexpr (HB * SV == 12) {
            values_slice12<HB, SV, T>(a, v_rows, h0, v0, keys);
        } else {
            values_slice<SV, HB, T>(a, v_rows, h0, v0, keys);
        }
    }
    switch (nv - v0) {
        case 3: values_slice<3, HB, T>(a, v_rows, h0, v0, keys); break;
        case 2: values_slice<2, HB, T>(a, v_rows, h0, v0, keys); break;
        case 1: values_slice<1, HB, T>(a, v_rows, h0, v0, keys); break;
        default: break;
    }
}

// HB heads from h0 over the keys of `keys` that each has (keys_of): together as far as all of them have keys,
// then each head alone (rows of a chunk's diagonal, whose key counts differ by one from row to row).
template <int HB, int SV, TensorType T>
void values_block(const AttentionGroupArgs& a, const uint8_t* const* v_rows, int64_t h0, KeyRange keys) {
    int64_t common = keys.end;
    for (int i = 0; i < HB; ++i) common = std::min(common, keys_of(a, h0 + i));
    if (common > keys.begin) values_heads<HB, SV, T>(a, v_rows, h0, KeyRange{keys.begin, common});
    if (a.head_keys == nullptr) return;
    const int64_t rest = std::max(keys.begin, common);
    for (int i = 0; i < HB; ++i) {
        const int64_t end = std::min(keys.end, keys_of(a, h0 + i));
        if (end > rest) values_heads<1, 4, T>(a, v_rows, h0 + i, KeyRange{rest, end});
    }
}

// Every head's values over the keys of `keys` (the shapes below).
template <TensorType T>
void values_all(const AttentionGroupArgs& a, const uint8_t* const* v_rows, KeyRange keys) {
    // Many heads (prefill tiles: rows × a group): 6 heads × 2 vectors, one V load per 12 fmas; else 3 heads ×
    // 4 vectors (a decode row's GQA group of 3 in one pass over V per 4 vectors).
    int64_t h0 = 0;
    for (; h0 + 6 <= a.n_heads; h0 += 6) values_block<6, 2, T>(a, v_rows, h0, keys);
    for (; h0 + 3 <= a.n_heads; h0 += 3) values_block<3, 4, T>(a, v_rows, h0, keys);
    switch (a.n_heads - h0) {
        case 2: values_block<2, 4, T>(a, v_rows, h0, keys); break;
        case 1: values_block<1, 4, T>(a, v_rows, h0, keys); break;
        default: break;
    }
}

// From this many heads (prefill: several query rows of a group share the call) the chunk's V rows are converted
// to f32 once (exact) instead of once per (6-head block, 2-vector slice), and the values pass walks the keys in
// blocks of kValueKeys, so that a block's V rows (64 × head_dim f32: 16 KB at head_dim 64) and the heads'
// numerators stay in L1 across the blocks of heads and slices. Each accumulator still takes its fmas in key
// order (stored and reloaded between blocks, exact): the same bits as one pass.
constexpr int64_t kConvertHeads = 12;
constexpr int64_t kValueKeys = 64;

template <TensorType T>
void attend(const AttentionGroupArgs& a) {
    const uint8_t* v_rows[kMaxKeys];  // the chunk's V rows, in key order
    RowCursor cursor(a.v_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key);
    for (int64_t j = 0; j < a.n_keys; ++j) v_rows[j] = cursor.next();
    scores<T>(a);
    for (int64_t h = 0; h < a.n_heads; ++h)
        simd::softmax_numerators(a.scores + h * a.n_keys, keys_of(a, h), a.max_score + h);
    all_numerator_sums(a);
    if (T == TensorType::F32 || a.n_heads < kConvertHeads) {
        values_all<T>(a, v_rows, KeyRange{0, a.n_keys});
        return;
    }
    thread_local ScratchArray v_f32;  // n_keys × head_dim
    float* converted = v_f32.floats(static_cast<size_t>(a.n_keys * a.head_dim));
    const uint8_t* f32_rows[kMaxKeys];
    const int64_t nv = a.head_dim / 8;
    for (int64_t j = 0; j < a.n_keys; ++j) {
        float* dst = converted + j * a.head_dim;
        for (int64_t c = 0; c < nv; ++c) _mm256_store_ps(dst + 8 * c, load8<T>(v_rows[j], c));
        f32_rows[j] = reinterpret_cast<const uint8_t*>(dst);
    }
    for (int64_t j0 = 0; j0 < a.n_keys; j0 += kValueKeys) {
        values_all<TensorType::F32>(a, f32_rows, KeyRange{j0, std::min(a.n_keys, j0 + kValueKeys)});
    }
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
