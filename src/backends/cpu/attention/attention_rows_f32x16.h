// The attention row operations (attention_rows.h) written once over simd::F32x16: the dot product's 16
// lane-wise fma chains and the canonical tree, and the axpy's per-element fma, exactly as the scalar
// reference (reference/attention_rows_ref.cpp) defines them, for K/V rows of f16, f32 or q8_0. The tail of
// a row that is not a multiple of 16 is loaded with its missing lanes +0: fma(+0, +0, p) == p for every
// partial sum p (none is -0), so the tail changes no lane it does not own. Include only from *_avx2.cpp /
// *_avx512.cpp / *_neon.cpp files (backends/cpu/simd/f32x16.h).
#pragma once

#include <algorithm>
#include <cmath>

#include "backends/cpu/attention/attention_rows.h"
#include "backends/cpu/exp/exp_f32x16.h"
#include "backends/cpu/simd/f32x16.h"

namespace kvstash::simd {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including ISA file

// The q8_0 block scale d of the 16 values from element i (a multiple of 16: they lie in one 32-value block).
inline float q8_0_scale(const uint8_t* row, int64_t i) {
    uint16_t d = 0;
    std::memcpy(&d, row + (i / kernels::kQ8_0BlockValues) * kernels::kQ8_0BlockBytes, 2);
    return half_to_float(d);
}
inline const int8_t* q8_0_values(const uint8_t* row, int64_t i) {
    return reinterpret_cast<const int8_t*>(row + (i / kernels::kQ8_0BlockValues) * kernels::kQ8_0BlockBytes + 2 +
                                           i % kernels::kQ8_0BlockValues);
}

// Elements [i, i + 16) of a KV row of `type` (i a multiple of 16), as f32 (exact).
inline F32x16 load_kv(const uint8_t* row, int64_t i, TensorType type) {
    switch (type) {
        case TensorType::F16: return load_f16(row + 2 * i);
        case TensorType::Q8_0: return load_i8_scaled(q8_0_values(row, i), q8_0_scale(row, i));
        default: return load(reinterpret_cast<const float*>(row) + i);
    }
}
// Elements [i, i + n) (n < 16), the other lanes +0.
inline F32x16 load_kv_first(const uint8_t* row, int64_t i, int64_t n, TensorType type) {
    switch (type) {
        case TensorType::F16: return load_f16_first(row + 2 * i, n);
        case TensorType::Q8_0: return load_i8_scaled_first(q8_0_values(row, i), q8_0_scale(row, i), n);
        default: return load_first(reinterpret_cast<const float*>(row) + i, n);
    }
}

inline float attention_dot(const float* q, const uint8_t* k_row, int64_t n, TensorType type) {
    F32x16 acc = zero();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) acc = fma(load(q + i), load_kv(k_row, i, type), acc);
    if (i < n) acc = fma(load_first(q + i, n - i), load_kv_first(k_row, i, n - i, type), acc);
    return reduce_add(acc);
}

inline void attention_axpy(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type) {
    const F32x16 wv = set1(w);
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) store(out + i, fma(wv, load_kv(v_row, i, type), load(out + i)));
    if (i < n) {
        store_first(out + i, fma(wv, load_kv_first(v_row, i, n - i, type), load_first(out + i, n - i)), n - i);
    }
}

// A chunk's softmax in the per-row order (attention.cpp, chunk_partial_rows): the max of the n scores at s,
// then the numerators exp_f32(s_j - max) in place. (The max is taken with vector max: the same value; only
// the sign of a zero maximum could differ, and exp(s - (+0)) == exp(s - (-0)) for every s.) The grouped
// kernels add the numerators' sums after (attention_numerator_sums.h).
inline void softmax_numerators(float* s, int64_t n, float* max_out) {
    F32x16 m = set1(-INFINITY);
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes) m = max(m, load(s + j));
    float max_score = reduce_max(m);
    for (; j < n; ++j) max_score = std::max(max_score, s[j]);
    exp_f32_shifted_row(s, s, n, max_score);
    *max_out = max_score;
}

// The same for 16 heads at once, heads in the lanes (the grouped kernels' many-heads paths): e holds n keys' scores,
// 16 floats a key (lane i: head i), m their max per lane. The numerators exp_f32(s - m) replace the scores (lane-wise,
// the same bits as exp_f32_shifted_row), and their sums, added in key order from +0 (the per-row sum), and the maxima
// go to the first `lanes` floats of sum_out and max_out. A key that a lane's head does not see (the rows of a chunk's
// diagonal) holds the score -inf: its numerator is +0 (exp_f32(-inf)), which leaves the sum as it was.
inline void softmax_numerators_in_lanes(float* e, int64_t n, F32x16 m, int64_t lanes, float* max_out, float* sum_out) {
    F32x16 sum = zero();
    for (int64_t j = 0; j < n; ++j) {
        const F32x16 x = exp_f32(sub(load(e + kLanes * j), m));
        sum = add(sum, x);
        store(e + kLanes * j, x);
    }
    store_first(max_out, m, lanes);
    store_first(sum_out, sum, lanes);
}

}  // namespace
}  // namespace kvstash::simd
