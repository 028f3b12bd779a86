// Loads and the horizontal sum of the AVX2 f32-activation matmul (matmul_avx2.cpp). Include only from
// *_avx2.cpp files. Internal linkage (an unnamed namespace), as when they lived in one file.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvstash::kernels {
namespace {

// F16C conversion: exact, equal to fp16_to_fp32 except that a signalling NaN comes back quiet.
[[maybe_unused]] float load_fp16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

[[maybe_unused]] uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

[[maybe_unused]] __m256i load_u8x8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// The fixed horizontal sum of 8 lanes that ends every dot product.
[[maybe_unused]] float hsum8(__m256 v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

}  // namespace
}  // namespace kvstash::kernels
