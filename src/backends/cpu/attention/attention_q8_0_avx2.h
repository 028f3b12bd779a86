// Eight values of a q8_0 KV row as f32 on AVX2 (backends/cpu/attention/attention_rows.h: d * q, exact, so bitwise the
// scalar q8_0_value). Included only by *_avx2.cpp files (compiled with AVX2+FMA+F16C).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvstash::kernels {
namespace {  // internal linkage: no weak symbol built for AVX2 (scripts/check_isa_symbols.sh)

// Elements i..i+7 of the q8_0 row at `row` (i a multiple of 8: the 8 lie in one 32-value block).
inline __m256 load8_q8_0(const uint8_t* row, int64_t i) {
    const uint8_t* block = row + (i / 32) * 34;
    uint16_t d = 0;
    std::memcpy(&d, block, 2);
    const __m256 scale = _mm256_set1_ps(_cvtsh_ss(d));
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + i % 32));
    return _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}

}  // namespace
}  // namespace kvstash::kernels
