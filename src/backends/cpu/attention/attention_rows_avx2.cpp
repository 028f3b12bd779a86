// AVX2 attention inner loops (8 lanes over the element index; f16 rows converted with F16C; q8_0 rows
// read as d * q, exact in f32: backends/cpu/attention/attention_rows.h).
#include <immintrin.h>

#include "backends/cpu/attention/attention_q8_0_avx2.h"
#include "backends/cpu/attention/attention_rows.h"
#include "backends/cpu/exp/exp_f32.h"

namespace kvstash::kernels {
namespace {

inline __m256 load8(const uint8_t* row, int64_t i, TensorType type) {
    if (type == TensorType::F16) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    if (type == TensorType::Q8_0) return load8_q8_0(row, i);
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
}

// Fixed-order horizontal sum of 8 lanes.
inline float hsum(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

}  // namespace

float attention_dot_avx2(const float* q, const uint8_t* k_row, int64_t n, TensorType type) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k_row, i, type), acc);
    float tail = 0.0f;
    if (i < n) tail = reference::attention_dot(q + i, k_row + kv_row_offset(type, i), n - i, type);
    return hsum(acc) + tail;
}

void attention_axpy_avx2(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type) {
    const __m256 wv = _mm256_set1_ps(w);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, load8(v_row, i, type), _mm256_loadu_ps(out + i)));
    }
    if (i < n) reference::attention_axpy(out + i, w, v_row + kv_row_offset(type, i), n - i, type);
}

}  // namespace kvstash::kernels
