// AVX-512 attention inner loops (16 lanes over the element index; f16 rows converted with F16C).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "backends/cpu/attention/attention_rows.h"
#include "backends/cpu/exp/exp_f32.h"

namespace kvstash::kernels {
namespace {

inline __m512 load16(const uint8_t* row, int64_t i, TensorType type) {
    if (type == TensorType::F16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
    }
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
}

}  // namespace

float attention_dot_avx512(const float* q, const uint8_t* k_row, int64_t n, TensorType type) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16(k_row, i, type), acc);
    float tail = 0.0f;
    if (i < n) tail = reference::attention_dot(q + i, k_row + i * (type == TensorType::F16 ? 2 : 4), n - i, type);
    return _mm512_reduce_add_ps(acc) + tail;
}

void attention_axpy_avx512(float* out, float w, const uint8_t* v_row, int64_t n, TensorType type) {
    const __m512 wv = _mm512_set1_ps(w);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(out + i, _mm512_fmadd_ps(wv, load16(v_row, i, type), _mm512_loadu_ps(out + i)));
    }
    if (i < n) reference::attention_axpy(out + i, w, v_row + i * (type == TensorType::F16 ? 2 : 4), n - i, type);
}

}  // namespace kvstash::kernels
