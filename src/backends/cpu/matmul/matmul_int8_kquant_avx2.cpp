// AVX2 integer-activation kernels of the K-quants (q4_K, q5_K, q6_K): bitwise the scalar definition
// (reference/matmul_int8_ref.cpp), whatever the token count, row range or thread count.
//
// The definition's block sum S_b = sum_j sc_j · sum_{e in j} wq_e·q_e (q = 256·h + l, the int16 activation
// plane) is an exact integer that may pass 2^31, rounded once to float. Here, for a tile of 8 weight rows:
//   * the rows are unpacked once into int16 weights already multiplied by their sub-block scale,
//     w = wq·sc_j, exact: |w| <= 15·63 = 945 (q4_K), 31·63 = 1953 (q5_K), 32·128 = 4096 (q6_K);
//   * per token and block, vpmaddwd of w with the token's q adds 2 products to each of 8 int32 lanes. A
//     lane of q4_K / q5_K holds 32 products of one block: |lane| <= 32·1953·32639 = 2,039,806,944 < 2^31;
//     a lane of q6_K holds 16 products per half block (elements 0-127, 128-255), so each half has its own
//     lanes: |lane| <= 16·4096·32639 = 2,139,029,504 < 2^31. The int32 lanes are exact;
//   * the lanes are converted to double and added there: every partial sum is an integer below
//     256·4096·32639 < 2^36 < 2^53, so each double addition is exact and S_b comes out exactly, in any
//     order; one cvtpd2ps rounds it to float, to nearest even (MXCSR default), as the definition's
//     static_cast<float>(int64) does. 8 rows' S_b end in one vector;
//   * the float steps are the definition's, on 8 rows at once, in block order: acc = fma(fl(d·dx), fl(S_b),
//     acc), and for q4_K / q5_K acc = fma(-fl(dmin·dx), fl(M_b), acc) with the int32 M_b = sum_j m_j ·
//     (256·h32 + l32) (|M_b| <= 8·63·32·32639 < 2^31, as in the definition).
// One token's outputs depend on that token's activations and the weights only, so batch invariance holds;
// the unpacked copy is made per 8-row tile and serves every token of the call. A call of one token (decode)
// makes no copy: the same unpacked vectors go straight into the same int32 lanes (one_token_tile), so its
// outputs are the same bits. Both prefetch the tile ahead (decode reads the weights from memory).
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/runtime/scratch.h"

namespace kvstash::kernels {
namespace {

constexpr int kRows = 8;  // rows per tile: the 8 lanes of a vector of outputs

__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

float fp16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);  // F16C: exact, fp16_to_fp32's value (a signalling NaN comes back quiet)
}

// Scale and min j (0..7) of a q4_K / q5_K super-block from its 12 packed bytes (ggml get_scale_min_k4).
void scale_min(int j, const uint8_t* q, int* scale, int* min) {
    if (j < 4) {
        *scale = q[j] & 63;
        *min = q[j + 4] & 63;
    } else {
        *scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// 32 unsigned bytes (the weights of 32 consecutive elements, from element e) as int16, minus `offset`, times
// sc_lo for elements 0-15 and sc_hi for 16-31, handed to sink(e, 16 int16) and sink(e + 16, 16 int16).
template <class Sink>
void emit_scaled(__m256i v, int offset, int sc_lo, int sc_hi, int e, Sink& sink) {
    const __m256i off = _mm256_set1_epi16(static_cast<int16_t>(offset));
    const __m256i lo = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)), off);
    const __m256i hi = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1)), off);
    sink(e, _mm256_mullo_epi16(lo, _mm256_set1_epi16(static_cast<int16_t>(sc_lo))));
    sink(e + 16, _mm256_mullo_epi16(hi, _mm256_set1_epi16(static_cast<int16_t>(sc_hi))));
}

// One super-block of one row unpacked: w = wq·sc (256 int16, element order) handed to sink 16 elements at a
// time, in element order; d, dmin as f32; mins[j].
template <class Sink>
void unpack_block(TensorType type, const uint8_t* blk, Sink& sink, float* d, float* dmin, int32_t* mins) {
    const __m256i nib = _mm256_set1_epi8(0x0F);
    if (type == TensorType::Q6_K) {
        const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
        for (int h = 0; h < 2; ++h) {
            const __m256i qh = load256(blk + 128 + 32 * h);
            for (int k = 0; k < 4; ++k) {  // elements 128 h + 32 k + l, l < 32: sub-blocks 8 h + 2 k, + 1
                const __m256i ql = load256(blk + 64 * h + 32 * (k % 2));
                const __m256i low = k < 2 ? _mm256_and_si256(ql, nib) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), nib);
                const __m256i high =
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(0x03)), 4);
                const int j = 8 * h + 2 * k;
                emit_scaled(_mm256_or_si256(low, high), 32, sc[j], sc[j + 1], 128 * h + 32 * k, sink);
            }
        }
        *d = fp16_at(blk + 208);
        *dmin = 0.0f;
        return;
    }
    const bool five = type == TensorType::Q5_K;
    const uint8_t* qs = blk + (five ? 48 : 16);
    const __m256i qh = five ? load256(blk + 16) : _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {  // sub-block j: low (j even) or high nibbles of bytes 32 (j / 2) ..
        const __m256i q = load256(qs + 32 * (j / 2));
        __m256i v = j % 2 == 0 ? _mm256_and_si256(q, nib) : _mm256_and_si256(_mm256_srli_epi16(q, 4), nib);
        if (five) {
            v = _mm256_or_si256(
                v, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(0x01)), 4));
        }
        int sc = 0, mn = 0;
        scale_min(j, blk + 4, &sc, &mn);
        emit_scaled(v, 0, sc, sc, 32 * j, sink);
        mins[j] = mn;
    }
    *d = fp16_at(blk);
    *dmin = fp16_at(blk + 2);
}

// The unpacked 8-row tile: w16 (8 rows × cols int16, row r at r·cols); per block b: d[b·8 + r],
// dmin[b·8 + r], mins[(b·8 + j)·8 + r].
struct Tile {
    int16_t* w16;
    float* d;
    float* dmin;
    int32_t* mins;
};

// Least software-prefetch distance, bytes (as the q8_0 few-token kernel's, matmul_int8_avx2.cpp): decode is
// bound by reading the weights from memory, and the hardware prefetchers alone fall behind.
constexpr int64_t kPrefetchBytes = 16384;

// Unpacks rows [r0, r0 + nr) and prefetches the bytes [prefetch_begin, prefetch_end) (a later tile of the
// same row range), one prefetch per 64-byte line, spread over the 8 rows.
void unpack_tile(const MatmulArgs& a, int64_t r0, int nr, const Tile& t, const uint8_t* prefetch_begin,
                 const uint8_t* prefetch_end) {
    const int64_t n_blocks = a.cols / 256;
    const uint64_t bytes = tensor_type_traits(a.type).type_size;
    const int64_t pf_step = ((prefetch_end - prefetch_begin) / kRows + 63) / 64 * 64;
    const uint8_t* pf = prefetch_begin;
    for (int r = 0; r < kRows; ++r) {  // missing rows repeat the last one (their lanes are never stored)
        for (const uint8_t* pf_stop = std::min(pf + pf_step, prefetch_end); pf < pf_stop; pf += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
        }
        const uint8_t* w = a.W + static_cast<uint64_t>(r0 + std::min(r, nr - 1)) * a.row_bytes;
        for (int64_t b = 0; b < n_blocks; ++b) {
            int32_t mins[8] = {};
            int16_t* out = t.w16 + r * a.cols + 256 * b;
            auto store = [out](int e, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + e), v); };
            unpack_block(a.type, w + b * bytes, store, t.d + b * kRows + r, t.dmin + b * kRows + r, mins);
            for (int j = 0; j < 8; ++j) t.mins[(b * 8 + j) * kRows + r] = mins[j];
        }
    }
}

// Exact sum of the 8 int32 lanes of v, as 4 double partial sums.
__m256d lanes_to_double(__m256i v) {
    return _mm256_add_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(v)),
                         _mm256_cvtepi32_pd(_mm256_extracti128_si256(v, 1)));
}

// Lane r: the sum of the 4 lanes of p[r] (integers below 2^53: exact), rounded once to float.
__m256 rows_to_float(const __m256d p[kRows]) {
    __m128 half[2];
    for (int g = 0; g < 2; ++g) {
        const __m256d x01 = _mm256_hadd_pd(p[4 * g], p[4 * g + 1]);  // r0 (0+1), r1 (0+1), r0 (2+3), r1 (2+3)
        const __m256d x23 = _mm256_hadd_pd(p[4 * g + 2], p[4 * g + 3]);
        const __m256d sum = _mm256_add_pd(_mm256_permute2f128_pd(x01, x23, 0x20),
                                          _mm256_permute2f128_pd(x01, x23, 0x31));  // rows 4g .. 4g + 3
        half[g] = _mm256_cvtpd_ps(sum);
    }
    return _mm256_set_m128(half[1], half[0]);
}

// Block b of token t against the tile: the 8 rows' fl(S_b).
template <bool kSixBit>
__m256 block_sums(const Tile& tile, int64_t cols, const int16_t* xq, int64_t b) {
    __m256d part[kRows];
    for (int r = 0; r < kRows; ++r) part[r] = _mm256_setzero_pd();   // + 0.0: exact
    constexpr int kHalves = kSixBit ? 2 : 1, kSteps = 16 / kHalves;  // 16-element steps per half
    for (int h = 0; h < kHalves; ++h) {
        __m256i acc[kRows];
        for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_si256();
        for (int k = 0; k < kSteps; ++k) {
            const int64_t e = 256 * b + 16 * (kSteps * h + k);
            const __m256i x = load256(xq + e);
            for (int r = 0; r < kRows; ++r) {
                acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(load256(tile.w16 + r * cols + e), x));
            }
        }
        for (int r = 0; r < kRows; ++r) {
            part[r] = _mm256_add_pd(part[r], lanes_to_double(acc[r]));
        }
    }
    return rows_to_float(part);
}

// Token t against the tile: out[r] = Y of (row r, token t).
template <bool kSixBit>
void tile_token(const Tile& tile, int64_t cols, const QuantizedActivations& xa, int64_t t, float* out) {
    const int16_t* xq = xa.q_row(t);
    const float* dx = xa.d_row(t);
    const int32_t* h32 = xa.h32_row(t);
    const int32_t* l32 = xa.l32_row(t);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < cols / 256; ++b) {
        const __m256 s = block_sums<kSixBit>(tile, cols, xq, b);
        const __m256 x = _mm256_broadcast_ss(dx + b);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(tile.d + b * kRows), x), s, acc);
        if (!kSixBit) {
            __m256i m = _mm256_setzero_si256();
            for (int j = 0; j < 8; ++j) {
                const __m256i sum_q = _mm256_set1_epi32(256 * h32[8 * b + j] + l32[8 * b + j]);
                m = _mm256_add_epi32(m, _mm256_mullo_epi32(load256(tile.mins + (b * 8 + j) * kRows), sum_q));
            }
            const __m256 cm = _mm256_mul_ps(_mm256_loadu_ps(tile.dmin + b * kRows), x);
            acc = _mm256_fmadd_ps(_mm256_xor_ps(cm, sign), _mm256_cvtepi32_ps(m), acc);  // -cm: exact negation
        }
    }
    _mm256_store_ps(out, acc);
}

// ---- one token (decode): no unpacked copy ----
// The steps of block_sums and tile_token on the weights unpacked in registers: each 16-element int16 vector
// goes straight into vpmaddwd with the token's activations, into the int32 lanes block_sums uses (q4_K / q5_K:
// one set per block; q6_K: one per half block), so every lane holds the same products under the same bound.

// Row block blk against the token's activations of its block (xq: 256 int16): S_b as 4 exact double lanes.
template <bool kSixBit>
__m256d row_block_sum(TensorType type, const uint8_t* blk, const int16_t* xq, float* d, float* dmin, int32_t* mins) {
    __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();  // elements 0-127 (q4_K / q5_K: all), 128-
    auto madd = [&](int e, __m256i w) {
        const __m256i p = _mm256_madd_epi16(w, load256(xq + e));
        if (!kSixBit || e < 128) {
            acc0 = _mm256_add_epi32(acc0, p);
        } else {
            acc1 = _mm256_add_epi32(acc1, p);
        }
    };
    unpack_block(type, blk, madd, d, dmin, mins);
    return kSixBit ? _mm256_add_pd(lanes_to_double(acc0), lanes_to_double(acc1)) : lanes_to_double(acc0);
}

// Token 0 against the 8 rows w[r]: out[r] = its Y; prefetches [prefetch_begin, prefetch_end) spread over the
// blocks, one prefetch per 64-byte line.
template <bool kSixBit>
void one_token_tile(const MatmulArgs& a, const uint8_t* const w[kRows], const uint8_t* prefetch_begin,
                    const uint8_t* prefetch_end, float* out) {
    const int64_t n_blocks = a.cols / 256;
    const uint64_t bytes = tensor_type_traits(a.type).type_size;
    const int16_t* xq = a.xq->q_row(0);
    const float* dx = a.xq->d_row(0);
    const int32_t* h32 = a.xq->h32_row(0);
    const int32_t* l32 = a.xq->l32_row(0);
    const int64_t pf_step = ((prefetch_end - prefetch_begin) / n_blocks + 63) / 64 * 64;
    const uint8_t* pf = prefetch_begin;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        for (const uint8_t* pf_stop = std::min(pf + pf_step, prefetch_end); pf < pf_stop; pf += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
        }
        alignas(32) float d[kRows], dmin[kRows];
        alignas(32) int32_t mins[8][kRows] = {};  // [j][r]
        __m256d part[kRows];
        for (int r = 0; r < kRows; ++r) {
            int32_t m[8] = {};
            part[r] = row_block_sum<kSixBit>(a.type, w[r] + b * bytes, xq + 256 * b, &d[r], &dmin[r], m);
            for (int j = 0; j < 8; ++j) mins[j][r] = m[j];
        }
        const __m256 s = rows_to_float(part);
        const __m256 x = _mm256_broadcast_ss(dx + b);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(d), x), s, acc);
        if (!kSixBit) {  // as tile_token
            __m256i m = _mm256_setzero_si256();
            for (int j = 0; j < 8; ++j) {
                const __m256i sum_q = _mm256_set1_epi32(256 * h32[8 * b + j] + l32[8 * b + j]);
                m = _mm256_add_epi32(m, _mm256_mullo_epi32(load256(mins[j]), sum_q));
            }
            const __m256 cm = _mm256_mul_ps(_mm256_load_ps(dmin), x);
            acc = _mm256_fmadd_ps(_mm256_xor_ps(cm, sign), _mm256_cvtepi32_ps(m), acc);  // -cm: exact negation
        }
    }
    _mm256_store_ps(out, acc);
}

}  // namespace

void matmul_int8_rows_kquant_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    thread_local ScratchArray w_buf, d_buf, dmin_buf, mins_buf;
    const int64_t n_blocks = a.cols / 256;
    const Tile tile{reinterpret_cast<int16_t*>(w_buf.ints(static_cast<size_t>(kRows * a.cols / 2))),
                    d_buf.floats(static_cast<size_t>(n_blocks * kRows)),
                    dmin_buf.floats(static_cast<size_t>(n_blocks * kRows)),
                    mins_buf.ints(static_cast<size_t>(n_blocks * 8 * kRows))};
    const bool six = a.type == TensorType::Q6_K;
    alignas(32) float out[kRows];
    const auto tile_bytes = static_cast<int64_t>(kRows * a.row_bytes);
    const int64_t ahead = std::max<int64_t>(1, (kPrefetchBytes + tile_bytes - 1) / tile_bytes) * tile_bytes;
    const uint8_t* range_end = a.W + static_cast<uint64_t>(std::max(row_end, a.prefetch_row_end)) * a.row_bytes;
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kRows, row_end - r0));
        const uint8_t* pf_begin = std::min(a.W + static_cast<uint64_t>(r0) * a.row_bytes + ahead, range_end);
        if (a.n_tokens == 1) {
            const uint8_t* w[kRows];  // missing rows repeat the last one (their lanes are never stored)
            for (int r = 0; r < kRows; ++r) w[r] = a.W + static_cast<uint64_t>(r0 + std::min(r, nr - 1)) * a.row_bytes;
            if (six) {
                one_token_tile<true>(a, w, pf_begin, std::min(pf_begin + tile_bytes, range_end), out);
            } else {
                one_token_tile<false>(a, w, pf_begin, std::min(pf_begin + tile_bytes, range_end), out);
            }
            for (int r = 0; r < nr; ++r) a.Y[r0 + r] = out[r];
            continue;
        }
        unpack_tile(a, r0, nr, tile, pf_begin, std::min(pf_begin + tile_bytes, range_end));
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            if (six) {
                tile_token<true>(tile, a.cols, *a.xq, t, out);
            } else {
                tile_token<false>(tile, a.cols, *a.xq, t, out);
            }
            float* y = a.Y + t * a.y_stride + r0;
            for (int r = 0; r < nr; ++r) y[r] = out[r];
        }
    }
}

}  // namespace kvstash::kernels
