// A 16-lane float vector for kernels written once for every vector instruction set: one zmm register on
// AVX-512, two ymm registers (lanes 0-7, 8-15) on AVX2, four NEON q registers (lanes 4k..4k+3) on aarch64.
// Every operation is lane-wise IEEE fp32 with one
// rounding (fma: one rounding of a·b + c), so a kernel written over F32x16 gives the same bits on both, and
// the same as a scalar reference that keeps 16 lanes (docs/architecture/canonical-float-ops.md). The one
// reduction, reduce_add, uses the canonical tree: p[j] + p[j+8], then + 4, + 2, + 1.
//
// Include only from *_avx2.cpp / *_avx512.cpp files (CMakeLists.txt gives them -mavx2 -mfma -mf16c or the
// AVX-512 flags) or, on aarch64, *_neon.cpp files (NEON is part of the baseline there); __aarch64__ and
// __AVX512F__ pick the layout. Everything has internal linkage: a file compiled for one
// instruction set must define no weak symbol (backends/cpu/runtime/scratch.h, scripts/check_isa_symbols.sh).
#pragma once

// The float steps exactly as written (an fma only where fma() asks for one), in every including file.
#pragma GCC optimize("fp-contract=off")

#if defined(__aarch64__)
#include <arm_neon.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "backends/cpu/simd/f32x16.h: compile with -mavx2 -mfma -mf16c (a *_avx2.cpp or *_avx512.cpp file)"
#endif
#endif

#include <cstdint>
#include <cstring>

namespace kvstash::simd {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including ISA file

inline constexpr int kLanes = 16;

#if defined(__aarch64__)  // NEON: lanes 4k..4k+3 in v[k]

struct F32x16 {
    float32x4_t v[4];
};

// op applied to each of the four registers (lanes 4k..4k+3 of every operand).
template <class Op>
inline F32x16 per_register(Op op, F32x16 a) {
    return {{op(a.v[0], 0), op(a.v[1], 1), op(a.v[2], 2), op(a.v[3], 3)}};
}
template <class Op>
inline F32x16 per_register(Op op, F32x16 a, F32x16 b) {
    return {{op(a.v[0], b.v[0]), op(a.v[1], b.v[1]), op(a.v[2], b.v[2]), op(a.v[3], b.v[3])}};
}

// All ones in lane i of register k where 4k + i < n.
inline uint32x4_t first_lanes4(int64_t n, int k) {
    const uint32x4_t index = {0, 1, 2, 3};
    const int64_t count = n - 4 * k;
    return vcltq_u32(index, vdupq_n_u32(static_cast<uint32_t>(count < 0 ? 0 : count > 4 ? 4 : count)));
}

inline F32x16 zero() {
    const float32x4_t z = vdupq_n_f32(0.0f);
    return {{z, z, z, z}};
}
inline F32x16 set1(float x) {
    const float32x4_t s = vdupq_n_f32(x);
    return {{s, s, s, s}};
}
inline F32x16 load(const float* p) { return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}}; }
// Lanes [0, n) from p, the others +0 (nothing past p + n is read).
inline F32x16 load_first(const float* p, int64_t n) {
    alignas(16) float lanes[kLanes] = {};
    std::memcpy(lanes, p, static_cast<size_t>(n) * sizeof(float));
    return load(lanes);
}
inline void store(float* p, F32x16 x) {
    for (int k = 0; k < 4; ++k) vst1q_f32(p + 4 * k, x.v[k]);
}
inline void store_first(float* p, F32x16 x, int64_t n) {
    alignas(16) float lanes[kLanes];
    store(lanes, x);
    std::memcpy(p, lanes, static_cast<size_t>(n) * sizeof(float));
}

inline F32x16 add(F32x16 a, F32x16 b) {
    return per_register([](float32x4_t x, float32x4_t y) { return vaddq_f32(x, y); }, a, b);
}
inline F32x16 sub(F32x16 a, F32x16 b) {
    return per_register([](float32x4_t x, float32x4_t y) { return vsubq_f32(x, y); }, a, b);
}
inline F32x16 mul(F32x16 a, F32x16 b) {
    return per_register([](float32x4_t x, float32x4_t y) { return vmulq_f32(x, y); }, a, b);
}
inline F32x16 div(F32x16 a, F32x16 b) {
    return per_register([](float32x4_t x, float32x4_t y) { return vdivq_f32(x, y); }, a, b);
}
inline F32x16 fma(F32x16 a, F32x16 b, F32x16 c) {  // a·b + c, one rounding
    return {{vfmaq_f32(c.v[0], a.v[0], b.v[0]), vfmaq_f32(c.v[1], a.v[1], b.v[1]), vfmaq_f32(c.v[2], a.v[2], b.v[2]),
             vfmaq_f32(c.v[3], a.v[3], b.v[3])}};
}
// max / min as x86's instructions (the layouts below): a > b ? a : b, so b where either is NaN (and b for +0
// against -0). NEON's fmax would return the NaN, fmaxnm the number: neither is x86's.
inline float32x4_t max4(float32x4_t a, float32x4_t b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
inline F32x16 max(F32x16 a, F32x16 b) { return per_register(max4, a, b); }
inline F32x16 min(F32x16 a, F32x16 b) {
    return per_register([](float32x4_t x, float32x4_t y) { return vbslq_f32(vcltq_f32(x, y), x, y); }, a, b);
}
inline F32x16 negate(F32x16 a) {  // flips the sign bit only
    return per_register([](float32x4_t x, int) { return vnegq_f32(x); }, a);
}
inline F32x16 round_to_nearest_even(F32x16 a) {
    return per_register([](float32x4_t x, int) { return vrndnq_f32(x); }, a);
}
inline F32x16 scale_by_pow2_halves(F32x16 p, F32x16 n) {
    return per_register(
        [](float32x4_t p4, float32x4_t n4) {
            const int32x4_t bias = vdupq_n_s32(127);
            const int32x4_t ni = vcvtnq_s32_f32(n4);  // n is integer-valued: exact
            const int32x4_t n1 = vshrq_n_s32(ni, 1);
            const int32x4_t n2 = vsubq_s32(ni, n1);
            const float32x4_t scale1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
            const float32x4_t scale2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
            return vmulq_f32(vmulq_f32(p4, scale1), scale2);
        },
        p, n);
}
inline F32x16 nan_else(F32x16 x, F32x16 y) {
    return per_register([](float32x4_t x4, float32x4_t y4) { return vbslq_f32(vceqq_f32(x4, x4), y4, x4); }, x, y);
}
inline F32x16 add_first(F32x16 a, F32x16 b, int64_t n) {
    const F32x16 s = add(a, b);
    return {{vbslq_f32(first_lanes4(n, 0), s.v[0], a.v[0]), vbslq_f32(first_lanes4(n, 1), s.v[1], a.v[1]),
             vbslq_f32(first_lanes4(n, 2), s.v[2], a.v[2]), vbslq_f32(first_lanes4(n, 3), s.v[3], a.v[3])}};
}

inline float32x4_t load_f16x4(const uint8_t* p) {
    uint16_t halves[4];
    std::memcpy(halves, p, sizeof(halves));
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(halves)));
}
inline F32x16 load_f16(const uint8_t* p) {
    return {{load_f16x4(p), load_f16x4(p + 8), load_f16x4(p + 16), load_f16x4(p + 24)}};
}
// 4 / 16 bf16 values at p as f32 (exact: the 16 bits become the high half of the float's).
inline float32x4_t load_bf16x4(const uint8_t* p) {
    uint16_t halves[4];
    std::memcpy(halves, p, sizeof(halves));
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(halves), 16));
}
inline F32x16 load_bf16(const uint8_t* p) {
    return {{load_bf16x4(p), load_bf16x4(p + 8), load_bf16x4(p + 16), load_bf16x4(p + 24)}};
}
// Keeps x in registers across a loop (an empty asm: no arithmetic; see the x86 layouts).
inline void keep_in_registers(F32x16& x) { asm("" : "+w"(x.v[0]), "+w"(x.v[1]), "+w"(x.v[2]), "+w"(x.v[3])); }
inline F32x16 load_i8_scaled(const int8_t* q, float d) {
    const int8x16_t bytes = vld1q_s8(q);
    const int16x8_t lo = vmovl_s8(vget_low_s8(bytes)), hi = vmovl_high_s8(bytes);
    const float32x4_t scale = vdupq_n_f32(d);
    return {{vmulq_f32(scale, vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)))),
             vmulq_f32(scale, vcvtq_f32_s32(vmovl_high_s16(lo))),
             vmulq_f32(scale, vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)))),
             vmulq_f32(scale, vcvtq_f32_s32(vmovl_high_s16(hi)))}};
}
// One f16 value as f32 (exact).
inline float half_to_float(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }

// The canonical tree: lanes j + (j + 8) are v[0] + v[2], v[1] + v[3]; then j + (j + 4), j + (j + 2), j + (j + 1).
inline float reduce_add(F32x16 p) {
    const float32x4_t r = vaddq_f32(vaddq_f32(p.v[0], p.v[2]), vaddq_f32(p.v[1], p.v[3]));
    const float32x2_t u = vadd_f32(vget_low_f32(r), vget_high_f32(r));
    return vget_lane_f32(u, 0) + vget_lane_f32(u, 1);
}
inline float reduce_max(F32x16 p) {  // AVX2's tree with x86's max: j and j + 8, j + 4, j + 2, j + 1
    const float32x4_t m4 = max4(max4(p.v[0], p.v[2]), max4(p.v[1], p.v[3]));
    const float32x2_t m2 = vbsl_f32(vcgt_f32(vget_low_f32(m4), vget_high_f32(m4)), vget_low_f32(m4), vget_high_f32(m4));
    const float a = vget_lane_f32(m2, 0), b = vget_lane_f32(m2, 1);
    return a > b ? a : b;
}

inline F32x16 load_pairs_duplicated(const float* p) {
    const float32x4_t lo = vld1q_f32(p), hi = vld1q_f32(p + 4);
    return {{vzip1q_f32(lo, lo), vzip2q_f32(lo, lo), vzip1q_f32(hi, hi), vzip2q_f32(hi, hi)}};
}
inline F32x16 swap_pairs(F32x16 x) {
    return per_register([](float32x4_t x4, int) { return vrev64q_f32(x4); }, x);
}
inline F32x16 sub_even_add_odd(F32x16 a, F32x16 b) {
    return per_register(
        [](float32x4_t a4, float32x4_t b4) {
            const uint32x4_t odd = {0, 0xFFFFFFFFu, 0, 0xFFFFFFFFu};
            return vbslq_f32(odd, vaddq_f32(a4, b4), vsubq_f32(a4, b4));
        },
        a, b);
}

// 16 double lanes (eight q registers, lanes 2q, 2q+1 in d[q]).
struct F64x16 {
    float64x2_t d[8];
};
inline F64x16 zero_f64() {
    const float64x2_t z = vdupq_n_f64(0.0);
    return {{z, z, z, z, z, z, z, z}};
}
inline F64x16 add_squares(F64x16 acc, F32x16 x) {
    for (int k = 0; k < 4; ++k) {
        const float64x2_t lo = vcvt_f64_f32(vget_low_f32(x.v[k])), hi = vcvt_high_f64_f32(x.v[k]);
        acc.d[2 * k] = vfmaq_f64(acc.d[2 * k], lo, lo);
        acc.d[2 * k + 1] = vfmaq_f64(acc.d[2 * k + 1], hi, hi);
    }
    return acc;
}
inline double reduce_add(F64x16 p) {
    // lanes j and j + 8 (d[q] + d[q + 4]), then j and j + 4 (q and q + 2), j + 2 (q and q + 1), j + 1.
    const float64x2_t q0 = vaddq_f64(p.d[0], p.d[4]), q1 = vaddq_f64(p.d[1], p.d[5]), q2 = vaddq_f64(p.d[2], p.d[6]),
                      q3 = vaddq_f64(p.d[3], p.d[7]);
    const float64x2_t u = vaddq_f64(vaddq_f64(q0, q2), vaddq_f64(q1, q3));
    return vgetq_lane_f64(u, 0) + vgetq_lane_f64(u, 1);
}

#elif defined(__AVX512F__)

struct F32x16 {
    __m512 v;
};

inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }  // n in [0, 16]

inline F32x16 zero() { return {_mm512_setzero_ps()}; }
inline F32x16 set1(float x) { return {_mm512_set1_ps(x)}; }
inline F32x16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
// Lanes [0, n) from p, the others +0 (nothing past p + n is read).
inline F32x16 load_first(const float* p, int64_t n) { return {_mm512_maskz_loadu_ps(first_lanes(n), p)}; }
inline void store(float* p, F32x16 x) { _mm512_storeu_ps(p, x.v); }
inline void store_first(float* p, F32x16 x, int64_t n) { _mm512_mask_storeu_ps(p, first_lanes(n), x.v); }

// x, held in registers from here on: a value used several times (a matmul tile's weights) is then read once,
// where the compiler would otherwise load it again from memory for every use. No arithmetic.
inline void keep_in_registers(F32x16& x) { asm("" : "+v"(x.v)); }

inline F32x16 add(F32x16 a, F32x16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline F32x16 sub(F32x16 a, F32x16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline F32x16 mul(F32x16 a, F32x16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline F32x16 div(F32x16 a, F32x16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline F32x16 fma(F32x16 a, F32x16 b, F32x16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }  // a·b + c
// max / min as the instructions: b where either is NaN.
inline F32x16 max(F32x16 a, F32x16 b) { return {_mm512_max_ps(a.v, b.v)}; }
inline F32x16 min(F32x16 a, F32x16 b) { return {_mm512_min_ps(a.v, b.v)}; }
inline F32x16 negate(F32x16 a) {
    return {_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(INT32_MIN)))};
}
inline F32x16 round_to_nearest_even(F32x16 a) {
    return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
// (p · 2^n1) · 2^n2 with n1 = n >> 1 (floor), n2 = n - n1, for integer-valued n with both halves in the normal
// exponent range: exp_f32's final scaling (backends/cpu/exp/exp_f32.h).
inline F32x16 scale_by_pow2_halves(F32x16 p, F32x16 n) {
    const __m512i ni = _mm512_cvtps_epi32(n.v);
    const __m512i n1 = _mm512_srai_epi32(ni, 1);
    const __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 scale1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const __m512 scale2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return {_mm512_mul_ps(_mm512_mul_ps(p.v, scale1), scale2)};
}
// x where x is NaN, else y.
inline F32x16 nan_else(F32x16 x, F32x16 y) {
    return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(x.v, x.v, _CMP_UNORD_Q), y.v, x.v)};
}
// Lanes [0, n) of a + b, the others a's.
inline F32x16 add_first(F32x16 a, F32x16 b, int64_t n) { return {_mm512_mask_add_ps(a.v, first_lanes(n), a.v, b.v)}; }

// 16 f16 values at p as f32 (exact).
inline F32x16 load_f16(const uint8_t* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
// 16 bf16 values at p as f32 (exact: the 16 bits become the high half of the float's).
inline F32x16 load_bf16(const uint8_t* p) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(h, 16))};
}
// 16 int8 values at q times d (exact in f32 when d is an f16 value: a q8_0 block's d · q).
inline F32x16 load_i8_scaled(const int8_t* q, float d) {
    const __m512 ints = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
    return {_mm512_mul_ps(_mm512_set1_ps(d), ints)};
}

// The canonical tree: q[j] = p[j] + p[j+8] (j < 8), r[j] = q[j] + q[j+4], u[j] = r[j] + r[j+2], u[0] + u[1].
inline float reduce_add(F32x16 p) {
    const __m256 q = _mm256_add_ps(_mm512_castps512_ps256(p.v), _mm512_extractf32x8_ps(p.v, 1));
    const __m128 r = _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));
    const __m128 u = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}
inline float reduce_max(F32x16 p) { return _mm512_reduce_max_ps(p.v); }  // exact in any order

// RoPE's pair operations, lanes (2k, 2k+1) holding pair k: each of the 8 floats at p twice (c0 c0 c1 c1 ...);
// the two lanes of every pair swapped; a - b in even lanes and a + b in odd lanes.
inline F32x16 load_pairs_duplicated(const float* p) {
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return {_mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(p)))};
}
inline F32x16 swap_pairs(F32x16 x) { return {_mm512_permute_ps(x.v, _MM_SHUFFLE(2, 3, 0, 1))}; }
inline F32x16 sub_even_add_odd(F32x16 a, F32x16 b) {
    return {_mm512_mask_add_ps(_mm512_sub_ps(a.v, b.v), static_cast<__mmask16>(0xAAAA), a.v, b.v)};
}

// 16 double lanes (two zmm registers): RMSNorm's partial sums of squares.
struct F64x16 {
    __m512d lo, hi;
};
inline F64x16 zero_f64() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
// acc + double(x)² lane-wise (the square is exact in double: one rounding, the add).
inline F64x16 add_squares(F64x16 acc, F32x16 x) {
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x.v));
    const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x.v, 1));
    return {_mm512_fmadd_pd(lo, lo, acc.lo), _mm512_fmadd_pd(hi, hi, acc.hi)};
}
// The canonical tree over the 16 double lanes.
inline double reduce_add(F64x16 p) {
    const __m512d q = _mm512_add_pd(p.lo, p.hi);
    const __m256d r = _mm256_add_pd(_mm512_castpd512_pd256(q), _mm512_extractf64x4_pd(q, 1));
    const __m128d u = _mm_add_pd(_mm256_castpd256_pd128(r), _mm256_extractf128_pd(r, 1));
    return _mm_cvtsd_f64(u) + _mm_cvtsd_f64(_mm_unpackhi_pd(u, u));
}

#else  // AVX2: lanes 0-7 in lo, 8-15 in hi

struct F32x16 {
    __m256 lo, hi;
};

inline __m256i first_lanes8(int64_t n) {  // n in [0, 8]
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline int64_t lo_count(int64_t n) { return n < 8 ? n : 8; }
inline int64_t hi_count(int64_t n) { return n > 8 ? n - 8 : 0; }

inline F32x16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline F32x16 set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline F32x16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline F32x16 load_first(const float* p, int64_t n) {
    return {_mm256_maskload_ps(p, first_lanes8(lo_count(n))), _mm256_maskload_ps(p + 8, first_lanes8(hi_count(n)))};
}
inline void store(float* p, F32x16 x) {
    _mm256_storeu_ps(p, x.lo);
    _mm256_storeu_ps(p + 8, x.hi);
}
inline void store_first(float* p, F32x16 x, int64_t n) {
    _mm256_maskstore_ps(p, first_lanes8(lo_count(n)), x.lo);
    _mm256_maskstore_ps(p + 8, first_lanes8(hi_count(n)), x.hi);
}

inline void keep_in_registers(F32x16& x) { asm("" : "+x"(x.lo), "+x"(x.hi)); }

inline F32x16 add(F32x16 a, F32x16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline F32x16 sub(F32x16 a, F32x16 b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
inline F32x16 mul(F32x16 a, F32x16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline F32x16 div(F32x16 a, F32x16 b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
inline F32x16 fma(F32x16 a, F32x16 b, F32x16 c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline F32x16 max(F32x16 a, F32x16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline F32x16 min(F32x16 a, F32x16 b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
inline F32x16 negate(F32x16 a) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    return {_mm256_xor_ps(a.lo, sign), _mm256_xor_ps(a.hi, sign)};
}
inline F32x16 round_to_nearest_even(F32x16 a) {
    constexpr int kMode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return {_mm256_round_ps(a.lo, kMode), _mm256_round_ps(a.hi, kMode)};
}
inline __m256 scale_by_pow2_halves8(__m256 p, __m256 n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 scale1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 scale2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, scale1), scale2);
}
inline F32x16 scale_by_pow2_halves(F32x16 p, F32x16 n) {
    return {scale_by_pow2_halves8(p.lo, n.lo), scale_by_pow2_halves8(p.hi, n.hi)};
}
inline F32x16 nan_else(F32x16 x, F32x16 y) {
    return {_mm256_blendv_ps(y.lo, x.lo, _mm256_cmp_ps(x.lo, x.lo, _CMP_UNORD_Q)),
            _mm256_blendv_ps(y.hi, x.hi, _mm256_cmp_ps(x.hi, x.hi, _CMP_UNORD_Q))};
}
inline F32x16 add_first(F32x16 a, F32x16 b, int64_t n) {
    const F32x16 s = add(a, b);
    return {_mm256_blendv_ps(a.lo, s.lo, _mm256_castsi256_ps(first_lanes8(lo_count(n)))),
            _mm256_blendv_ps(a.hi, s.hi, _mm256_castsi256_ps(first_lanes8(hi_count(n))))};
}

inline F32x16 load_f16(const uint8_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)))};
}
inline __m256 bf16x8_to_f32(const uint8_t* p) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}
inline F32x16 load_bf16(const uint8_t* p) { return {bf16x8_to_f32(p), bf16x8_to_f32(p + 16)}; }
inline F32x16 load_i8_scaled(const int8_t* q, float d) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    const __m256 scale = _mm256_set1_ps(d);
    return {_mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes))),
            _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(bytes, bytes))))};
}

inline float reduce_add(F32x16 p) {
    const __m256 q = _mm256_add_ps(p.lo, p.hi);
    const __m128 r = _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1));
    const __m128 u = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}
inline float reduce_max(F32x16 p) {
    const __m256 m8 = _mm256_max_ps(p.lo, p.hi);
    const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
}

inline F32x16 load_pairs_duplicated(const float* p) {
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    return {_mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), dup),
            _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(p + 4)), dup)};
}
inline F32x16 swap_pairs(F32x16 x) {
    return {_mm256_permute_ps(x.lo, _MM_SHUFFLE(2, 3, 0, 1)), _mm256_permute_ps(x.hi, _MM_SHUFFLE(2, 3, 0, 1))};
}
inline F32x16 sub_even_add_odd(F32x16 a, F32x16 b) {
    return {_mm256_addsub_ps(a.lo, b.lo), _mm256_addsub_ps(a.hi, b.hi)};
}

// 16 double lanes (four ymm registers, lanes 4q..4q+3 in d[q]).
struct F64x16 {
    __m256d d[4];
};
inline F64x16 zero_f64() {
    return {{_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()}};
}
inline F64x16 add_squares(F64x16 acc, F32x16 x) {
    const __m256d parts[4] = {
        _mm256_cvtps_pd(_mm256_castps256_ps128(x.lo)), _mm256_cvtps_pd(_mm256_extractf128_ps(x.lo, 1)),
        _mm256_cvtps_pd(_mm256_castps256_ps128(x.hi)), _mm256_cvtps_pd(_mm256_extractf128_ps(x.hi, 1))};
    for (int q = 0; q < 4; ++q) acc.d[q] = _mm256_fmadd_pd(parts[q], parts[q], acc.d[q]);
    return acc;
}
inline double reduce_add(F64x16 p) {
    // lanes j and j + 8 (d[0] + d[2], d[1] + d[3]), then j and j + 4, j + 2, j + 1.
    const __m256d r = _mm256_add_pd(_mm256_add_pd(p.d[0], p.d[2]), _mm256_add_pd(p.d[1], p.d[3]));
    const __m128d u = _mm_add_pd(_mm256_castpd256_pd128(r), _mm256_extractf128_pd(r, 1));
    return _mm_cvtsd_f64(u) + _mm_cvtsd_f64(_mm_unpackhi_pd(u, u));
}

#endif

#if !defined(__aarch64__)
inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }  // one f16 value as f32 (exact)
#endif

// f16, bf16 and q8_0 tails: lanes [0, n) of 16 values at p, the others +0 (nothing past the n values is read).
inline F32x16 load_f16_first(const uint8_t* p, int64_t n) {
    alignas(32) uint8_t halves[2 * kLanes] = {};
    std::memcpy(halves, p, static_cast<size_t>(2 * n));
    return load_f16(halves);
}
inline F32x16 load_bf16_first(const uint8_t* p, int64_t n) {
    alignas(32) uint8_t halves[2 * kLanes] = {};
    std::memcpy(halves, p, static_cast<size_t>(2 * n));
    return load_bf16(halves);
}
inline F32x16 load_i8_scaled_first(const int8_t* q, float d, int64_t n) {
    alignas(16) int8_t bytes[kLanes] = {};
    std::memcpy(bytes, q, static_cast<size_t>(n));
    return load_i8_scaled(bytes, d);
}

}  // namespace
}  // namespace kvstash::simd
