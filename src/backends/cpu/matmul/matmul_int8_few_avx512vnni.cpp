// AVX-512 VNNI integer-activation matmul, a few tokens, 32-element blocks (q4_0, q4_1, q8_0): each block
// pair of a 16-row tile unpacked once, then multiplied with every token (scheme in
// matmul_int8_few_avx512vnni.h; the products and float steps are decode_tile_blocks32's,
// matmul_int8_decode_avx512vnni.cpp). Bitwise equal to the scalar definition (reference/matmul_int8_ref.cpp).
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/matmul_int8_few_avx512vnni.h"

#include <algorithm>
#include <cstdlib>

#include "backends/cpu/runtime/scratch.h"

namespace kvstash::kernels::int8_avx512 {
namespace {

// A block pair (b, b+1) of 16 rows, unpacked: row r's 64 unsigned weights in element order (q4: the nibbles,
// q8_0: q + 128; block b in bytes 0-31, b+1 in 32-63, zero where there is no b+1), and the rows' f32 scales
// (d0, d1) and, for q4_1, mins (m0, m1) with lane = row.
struct BlockPair {
    __m512i w[kRows];
    __m512 d0, d1, m0, m1;
};

// Unpacks block pairs of one type: decode_tile_blocks32's unpacking, once per pair for all tokens.
template <TensorType type>
class BlockPairUnpacker {
public:
    static constexpr int kBytes = type == TensorType::Q4_0 ? 18 : type == TensorType::Q4_1 ? 20 : 34;

    BlockPairUnpacker() {
        // q4_0 / q4_1: byte i of the weight vector takes quant byte i % 16 of block i / 32.
        const int off = type == TensorType::Q4_1 ? 4 : 2;
        alignas(64) int8_t spread_bytes[64];
        for (int i = 0; i < 64; ++i) spread_bytes[i] = static_cast<int8_t>((i / 32) * kBytes + off + i % 16);
        spread_ = _mm512_load_si512(spread_bytes);
    }

    // rows[r] + off: row r's block b (rows past the matrix repeat its last row; their outputs are not stored).
    // Prefetches the same bytes `ahead` further (the next tile's).
    void unpack(const uint8_t* const* rows, int64_t off, bool pair, int64_t ahead, bool to_l1, BlockPair& out) const {
        const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
        const __m512i nibble_shift = _mm512_setr_epi32(0, 0, 0, 0, 0x00040004, 0x00040004, 0x00040004, 0x00040004, 0, 0,
                                                       0, 0, 0x00040004, 0x00040004, 0x00040004, 0x00040004);
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        const auto low_bytes = [](int n) { return n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1; };
        const __mmask64 mask = low_bytes(pair ? 2 * kBytes : kBytes);
        alignas(64) int32_t head[2][kRows];  // the first dword (d, or d and m) of blocks b, b+1 of each row
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r) {
            const uint8_t* blk = rows[r] + off;
            // Two blocks are 36-68 bytes: a line at the start, and for q8_0 one at the end of the pair.
            prefetch(blk + ahead, to_l1);
            if constexpr (2 * kBytes > 64) prefetch(blk + ahead + 2 * kBytes - 1, to_l1);
            head[0][r] = load_i32(blk);
            head[1][r] = pair ? load_i32(blk + kBytes) : 0;
            if constexpr (type == TensorType::Q8_0) {
                const __m256i lo = _mm256_xor_si256(load256(blk + 2), bias);
                out.w[r] = pair ? join(lo, _mm256_xor_si256(load256(blk + 36), bias)) : _mm512_zextsi256_si512(lo);
            } else {
                const __m512i raw = _mm512_maskz_loadu_epi8(mask, blk);
                out.w[r] =
                    _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi8(spread_, raw), nibble_shift), low4);
            }
        }
        const __m512i h0 = _mm512_load_si512(head[0]), h1 = _mm512_load_si512(head[1]);
        out.d0 = low_half_fp16(h0);
        out.d1 = low_half_fp16(h1);
        out.m0 = high_half_fp16(h0);
        out.m1 = high_half_fp16(h1);
    }

private:
    __m512i spread_;
};

// The products of a block pair with tokens t0 .. t0 + NT - 1 (NT <= 2), added to their accumulators acc[j]
// (lane = row) in the order of the definition. Rows are reduced 4 at a time (steps D = 1, 2), then across
// groups (D = 4), so that at most NT × 8 row vectors are live.
template <int NT, TensorType type>
__attribute__((always_inline)) inline void block_pair_tokens(const BlockPair& wp, const QuantizedActivations& xa,
                                                             int64_t t0, int64_t b, bool pair, __m512* acc) {
    constexpr int shift = type == TensorType::Q4_0 ? 3 : type == TensorType::Q8_0 ? 7 : 0;
    __m512i x_h[NT], x_l[NT], init_h[NT], init_l[NT];
    for (int j = 0; j < NT; ++j) {
        const int8_t* ph = xa.h_row(t0 + j) + 32 * b;
        const int8_t* pl = xa.l_row(t0 + j) + 32 * b;
        x_h[j] = pair ? _mm512_loadu_si512(ph) : _mm512_zextsi256_si512(load256(reinterpret_cast<const uint8_t*>(ph)));
        x_l[j] = pair ? _mm512_loadu_si512(pl) : _mm512_zextsi256_si512(load256(reinterpret_cast<const uint8_t*>(pl)));
        const int32_t* h32 = xa.h32_row(t0 + j) + b;
        const int32_t* l32 = xa.l32_row(t0 + j) + b;
        init_h[j] = init_l[j] = _mm512_setzero_si512();
        if constexpr (shift != 0) {
            init_h[j] = _mm512_mask_set1_epi32(init_h[j], 1, -(h32[0] << shift));
            init_l[j] = _mm512_mask_set1_epi32(init_l[j], 1, -(l32[0] << shift));
            if (pair) {
                init_h[j] = _mm512_mask_set1_epi32(init_h[j], 1 << 8, -(h32[1] << shift));
                init_l[j] = _mm512_mask_set1_epi32(init_l[j], 1 << 8, -(l32[1] << shift));
            }
        }
    }
    __m512i part[NT][4];  // rows 4q .. 4q+3 after steps D = 1, 2
    for (int q = 0; q < 4; ++q) {
        __m512i v[NT][4];
        for (int i = 0; i < 4; ++i) {
            const __m512i wv = wp.w[4 * q + i];
            for (int j = 0; j < NT; ++j) {
                v[j][i] = _mm512_add_epi32(_mm512_slli_epi32(_mm512_dpbusd_epi32(init_h[j], wv, x_h[j]), 8),
                                           _mm512_dpbusd_epi32(init_l[j], wv, x_l[j]));
            }
        }
        for (int j = 0; j < NT; ++j) {
            part[j][q] = pair_step<2>(pair_step<1>(v[j][0], v[j][1]), pair_step<1>(v[j][2], v[j][3]));
        }
    }
    for (int j = 0; j < NT; ++j) {
        // Rows 0-7 and 8-15 (lane = row within each 8-lane group: group 0 block b, group 1 block b+1).
        const __m512i half0 = pair_step<4>(part[j][0], part[j][1]), half1 = pair_step<4>(part[j][2], part[j][3]);
        const __m512i s0 = _mm512_shuffle_i64x2(half0, half1, _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i s1 = _mm512_shuffle_i64x2(half0, half1, _MM_SHUFFLE(3, 2, 3, 2));
        const float* dx = xa.d_row(t0 + j) + b;
        const int32_t* h32 = xa.h32_row(t0 + j) + b;
        const int32_t* l32 = xa.l32_row(t0 + j) + b;
        __m512 a = acc[j];
        a = _mm512_fmadd_ps(_mm512_mul_ps(wp.d0, _mm512_set1_ps(dx[0])), _mm512_cvtepi32_ps(s0), a);
        if constexpr (type == TensorType::Q4_1) {
            const float sx = dx[0] * static_cast<float>(256 * h32[0] + l32[0]);
            a = _mm512_fmadd_ps(wp.m0, _mm512_set1_ps(sx), a);
        }
        if (pair) {
            a = _mm512_fmadd_ps(_mm512_mul_ps(wp.d1, _mm512_set1_ps(dx[1])), _mm512_cvtepi32_ps(s1), a);
            if constexpr (type == TensorType::Q4_1) {
                const float sx = dx[1] * static_cast<float>(256 * h32[1] + l32[1]);
                a = _mm512_fmadd_ps(wp.m1, _mm512_set1_ps(sx), a);
            }
        }
        acc[j] = a;
    }
}

// One 16-row tile (nr valid rows from w), every token of xa; acc: n_tokens vectors of scratch.
template <TensorType type>
void few_tile_blocks32(const BlockPairUnpacker<type>& unpacker, const uint8_t* w, uint64_t row_bytes, int nr,
                       int64_t cols, const QuantizedActivations& xa, int64_t n_tokens, __m512* acc, float* y,
                       int64_t y_stride) {
    constexpr int bytes = BlockPairUnpacker<type>::kBytes;
    const int64_t n_blocks = cols / 32;
    const int64_t ahead = prefetch_distance(row_bytes);
    const bool to_l1 = ahead <= kPrefetchL1Bytes;
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w + static_cast<uint64_t>(std::min(r, nr - 1)) * row_bytes;
    for (int64_t j = 0; j < n_tokens; ++j) acc[j] = _mm512_setzero_ps();
    BlockPair wp;
    for (int64_t b = 0; b < n_blocks; b += 2) {
        const bool pair = b + 1 < n_blocks;
        unpacker.unpack(rows, b * bytes, pair, ahead, to_l1, wp);
        int64_t t = 0;
        for (; t + 2 <= n_tokens; t += 2) block_pair_tokens<2, type>(wp, xa, t, b, pair, acc + t);
        if (t < n_tokens) block_pair_tokens<1, type>(wp, xa, t, b, pair, acc + t);
    }
    const auto mask = static_cast<__mmask16>((1u << nr) - 1);
    for (int64_t j = 0; j < n_tokens; ++j) _mm512_mask_storeu_ps(y + j * y_stride, mask, acc[j]);
}

template <TensorType type>
void rows_of_type(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    thread_local ScratchArray acc_buf;
    auto* acc = reinterpret_cast<__m512*>(acc_buf.floats(static_cast<size_t>(a.n_tokens * kRows)));
    const BlockPairUnpacker<type> unpacker;
    for (int64_t r = row_begin; r < row_end; r += kRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kRows, row_end - r));
        few_tile_blocks32<type>(unpacker, a.W + static_cast<uint64_t>(r) * a.row_bytes, a.row_bytes, nr, a.cols, *a.xq,
                                a.n_tokens, acc, a.Y + r, a.y_stride);
    }
}

}  // namespace

namespace {
// KVSTASH_FEW_TOKENS_MAX (>= kFewTokensMax), or 0 where unset. Read once.
int64_t forced_few_tokens_max() {
    static const int64_t forced = [] {
        const char* set = std::getenv("KVSTASH_FEW_TOKENS_MAX");
        return set != nullptr ? std::max<int64_t>(kFewTokensMax, std::atoll(set)) : int64_t{0};
    }();
    return forced;
}
}  // namespace

int64_t few_tokens_max_repacked(TensorType type) {
    if (forced_few_tokens_max() != 0) return forced_few_tokens_max();
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q8_0: return kFewTokensMax;
        case TensorType::Q6_K: return 7;
        case TensorType::Q4_K: return 8;
        default: return few_tokens_max(type);
    }
}

int64_t few_tokens_max(TensorType type) {
    if (forced_few_tokens_max() != 0) return forced_few_tokens_max();
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q4_1: return 5;
        case TensorType::Q8_0: return 9;
        case TensorType::Q5_K: return 12;
        default: return kFewTokensChunkedMax;  // q4_K, q6_K
    }
}

void few_tokens_rows_blocks32(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.type == TensorType::Q8_0) {
        rows_of_type<TensorType::Q8_0>(a, row_begin, row_end);
    } else if (a.type == TensorType::Q4_1) {
        rows_of_type<TensorType::Q4_1>(a, row_begin, row_end);
    } else {
        rows_of_type<TensorType::Q4_0>(a, row_begin, row_end);
    }
}

void few_tokens_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.type == TensorType::Q4_K || a.type == TensorType::Q5_K || a.type == TensorType::Q6_K) {
        few_tokens_rows_super_blocks(a, row_begin, row_end);
    } else {
        few_tokens_rows_blocks32(a, row_begin, row_end);
    }
}

}  // namespace kvstash::kernels::int8_avx512
