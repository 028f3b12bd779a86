// AVX-512 grouped-query attention of one query row over one key chunk (kernels/attention_group.h): the
// per-row path's arithmetic, bitwise, with each K/V row read once per group and no per-key call or
// reduction.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>

#include "kernels/attention_group.h"
#include "kernels/exp_f32.h"

namespace kvstash::kernels {
namespace {

constexpr int kKeys = 16;  // keys per score tile

// Walks one KV head's rows in key order, block by block, from absolute position `first`.
struct RowCursor {
    const uint8_t* const* blocks;
    uint64_t offset;
    int64_t block_tokens;
    uint64_t row_bytes;
    int64_t block;
    int64_t in_block;

    RowCursor(const uint8_t* const* b, uint64_t off, int64_t bt, uint64_t rb, int64_t first)
        : blocks(b), offset(off), block_tokens(bt), row_bytes(rb), block(first / bt), in_block(first % bt) {}

    const uint8_t* next() {
        const uint8_t* row = blocks[block] + static_cast<uint64_t>(in_block) * row_bytes + offset;
        if (++in_block == block_tokens) {
            in_block = 0;
            ++block;
        }
        return row;
    }
};

// Software prefetch of one head's slice of a row (`bytes` from `row`), every 64-byte line it touches, as the
// AVX2 kernel does (attention_group_avx2.cpp: the hardware prefetchers alone leave decode latency-bound).
inline void prefetch_slice(const uint8_t* row, uint64_t bytes) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63};
    const uintptr_t end = reinterpret_cast<uintptr_t>(row) + bytes;
    for (uintptr_t line = first; line < end; line += 64) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
}

// K rows are prefetched this many keys ahead of the score tile; each tile's V rows alongside its scores.
constexpr int64_t kPrefetchKeys = 16;

template <bool F16>
inline __m512 load16(const uint8_t* row, int chunk) {
    if constexpr (F16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * chunk)));
    } else {
        return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + 16 * chunk);
    }
}

// r[k] = the horizontal sum of v[k], for 16 vectors at once, with exactly the pairing of lanes that
// _mm512_reduce_add_ps uses (GCC: lanes i and i+8, then i and i+4, then i and i+2, then i and i+1;
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

// Scores of every head against every key: (hsum(fma chain over the 16-element chunks) + 0) * scale,
// as the per-row dot (whose tail term is 0.0f for whole chunks).
template <int NC, bool F16>
void scores(const AttentionGroupArgs& a) {
    RowCursor cursor(a.k_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key);
    RowCursor k_ahead(a.k_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key);
    RowCursor v_ahead(a.v_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key);
    const uint64_t bytes = static_cast<uint64_t>(a.head_dim) * (F16 ? 2 : 4);
    int64_t k_prefetched = 0;
    const __m512 zero = _mm512_setzero_ps();
    const __m512 scale = _mm512_set1_ps(a.scale);
    alignas(64) float tile[kKeys][NC * 16];
    for (int64_t j0 = 0; j0 < a.n_keys; j0 += kKeys) {
        const int n = static_cast<int>(std::min<int64_t>(kKeys, a.n_keys - j0));
        for (const int64_t until = std::min(a.n_keys, j0 + n + kPrefetchKeys); k_prefetched < until; ++k_prefetched) {
            prefetch_slice(k_ahead.next(), bytes);
        }
        for (int k = 0; k < n; ++k) prefetch_slice(v_ahead.next(), bytes);
        for (int k = 0; k < n; ++k) {
            const uint8_t* row = cursor.next();
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
            const __m512 s = _mm512_mul_ps(_mm512_add_ps(hsum16(acc), zero), scale);
            float* dst = a.scores + h * a.n_keys + j0;
            if (n == kKeys) {
                _mm512_storeu_ps(dst, s);
            } else {
                _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << n) - 1), s);
            }
        }
    }
}

// Softmax numerators in place, their max and their sum, in the per-row path's order: max, then exp and a
// sequential sum in key order. (The max is taken with vector max: the value is the same; only the sign of
// a zero maximum could differ, and exp(s - (+0)) == exp(s - (-0)) for every s.)
void softmax_numerators(float* s, int64_t n, float* max_out, float* sum_out) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + j));
    if (j < n) {
        const auto mask = static_cast<__mmask16>((1u << (n - j)) - 1);
        m = _mm512_max_ps(m, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), mask, s + j));
    }
    const float max_score = _mm512_reduce_max_ps(m);
    exp_f32_shifted_row_avx512(s, s, n, max_score);  // what the per-row path's exp_shifted is on AVX-512
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += s[i];
    *max_out = max_score;
    *sum_out = sum;
}

// acc[h] = sum over keys in order of fma(e_hj, v_j, .), from 0, for HB heads from h0, sharing each V
// row's load.
template <int NC, int HB, bool F16>
void values(const AttentionGroupArgs& a, int64_t h0) {
    RowCursor cursor(a.v_blocks, a.offset, a.block_tokens, a.row_bytes, a.first_key);
    __m512 acc[HB][NC];
    for (int i = 0; i < HB; ++i) {
        for (int c = 0; c < NC; ++c) acc[i][c] = _mm512_setzero_ps();
    }
    const float* e[HB];
    for (int i = 0; i < HB; ++i) e[i] = a.scores + (h0 + i) * a.n_keys;
    for (int64_t j = 0; j < a.n_keys; ++j) {
        const uint8_t* row = cursor.next();
        __m512 v[NC];
        for (int c = 0; c < NC; ++c) v[c] = load16<F16>(row, c);
        for (int i = 0; i < HB; ++i) {
            const __m512 w = _mm512_set1_ps(e[i][j]);
            for (int c = 0; c < NC; ++c) acc[i][c] = _mm512_fmadd_ps(w, v[c], acc[i][c]);
        }
    }
    for (int i = 0; i < HB; ++i) {
        float* out = a.acc + (h0 + i) * a.head_dim;
        for (int c = 0; c < NC; ++c) _mm512_storeu_ps(out + 16 * c, acc[i][c]);
    }
}

template <int NC, bool F16>
void attend(const AttentionGroupArgs& a) {
    scores<NC, F16>(a);
    constexpr int kHeadsPerPass = NC <= 4 ? 4 : 2;  // HB * NC accumulators + NC values <= 32 registers
    for (int64_t h0 = 0; h0 < a.n_heads; h0 += kHeadsPerPass) {
        const int nh = static_cast<int>(std::min<int64_t>(kHeadsPerPass, a.n_heads - h0));
        for (int i = 0; i < nh; ++i) {
            const int64_t h = h0 + i;
            softmax_numerators(a.scores + h * a.n_keys, a.n_keys, a.max_score + h, a.sum + h);
        }
        switch (nh) {
            case 4: values<NC, (kHeadsPerPass >= 4 ? 4 : 1), F16>(a, h0); break;
            case 3: values<NC, (kHeadsPerPass >= 3 ? 3 : 1), F16>(a, h0); break;
            case 2: values<NC, 2, F16>(a, h0); break;
            default: values<NC, 1, F16>(a, h0); break;
        }
    }
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
