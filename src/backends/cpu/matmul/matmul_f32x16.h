// The matmul with f32 activations (f32 / f16 / bf16 weights) written once over simd::F32x16, for every vector
// ISA: matmul_avx2.cpp, matmul_avx512.cpp and matmul_neon.cpp instantiate it with their register tiling. matmul() uses
// it for the float weight types only; the block-quantized types take integer activations on every path (matmul_int8_*,
// docs/architecture/canonical-matmul.md).
//
// A tile of rows is decoded once into an L1-resident f32 buffer (f16 through F16C, bf16 by a shift: both
// exact, dequantize_row's values; f32 rows are read in place), then reused by every token of a block of
// tokens, one register tile of NR rows × NT tokens at a time.
//
// Reduction order of one dot product Y[t][r]: the canonical 16-lane one of the scalar reference
// (reference/matmul_ref.cpp), the same in every tile shape and on every ISA:
//   acc (16 lanes) = +0; for k = 0, 16, 32, ...: acc = fma(w[k..k+15], x[k..k+15], acc)
//   (a partial last chunk is loaded masked, zeros beyond cols); result = reduce_add(acc) (the canonical tree).
// The tiling below (rows and tokens per register tile, tokens per pass, column slices) only decides which
// outputs are in flight together: no bit depends on it.
//
// Include only from *_avx2.cpp / *_avx512.cpp / *_neon.cpp files (backends/cpu/simd/f32x16.h); internal linkage.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/runtime/scratch.h"
#include "backends/cpu/simd/f32x16.h"

namespace kvstash::simd {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including ISA file

// An ISA's tiling, as a type with these constants (see matmul_avx2.cpp, matmul_avx512.cpp):
//   kRowsOneToken          rows per register tile when n_tokens == 1 (NT = 1);
//   kRows, kTokens         rows × tokens per register tile otherwise;
//   kTokenBlock            most tokens per pass over a decoded row tile;
//   kActivationBlockBytes  if > 0, fewer tokens per pass where their activations (tokens × cols floats) would
//                          exceed this (so that they stay in L2), at least kTokens;
//   kColumnSlice           if > 0, each pass runs the token tiles over column slices of about this many
//                          columns (the row tile's slice stays in L1), parking the accumulators between slices.

// The n f16 (kF16) or bf16 values at src as f32 (dequantize_row's, bitwise).
template <bool kF16>
void decode_halves(const uint8_t* src, float* dst, int64_t n) {
    auto load16 = [](const uint8_t* p) { return kF16 ? load_f16(p) : load_bf16(p); };
    auto load16_first = [](const uint8_t* p, int64_t m) { return kF16 ? load_f16_first(p, m) : load_bf16_first(p, m); };
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) store(dst + i, load16(src + 2 * i));
    if (i < n) store_first(dst + i, load16_first(src + 2 * i, n - i), n - i);
}

// f32 values of the n elements of one f16 / bf16 row at src (f32 rows are read in place; matmul() sends no
// other type here: the block-quantized ones take integer activations).
inline void decode_half_row(TensorType type, const uint8_t* src, float* dst, int64_t n) {
    if (type == TensorType::F16) {
        decode_halves<true>(src, dst, n);
    } else {
        decode_halves<false>(src, dst, n);
    }
}

// Columns [k_begin, k_end) of y[j * y_stride + i] = dot(w[i], x + j * cols) for i < NR, j < NT: the
// accumulators start at +0 for k_begin = 0, else from `park` (where the previous slice left them), and are
// summed into y after the last slice (k_end = cols), else parked. Parking a vector is exact, so the fma
// sequence of every output is the same as in one pass over all columns.
template <int NR, int NT>
void buffered_tile(const float* const* w, const float* x, int64_t cols, int64_t k_begin, int64_t k_end, F32x16* park,
                   float* y, int64_t y_stride) {
    F32x16 acc[NR][NT];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) acc[i][j] = k_begin == 0 ? zero() : park[i * NT + j];
    int64_t k = k_begin;
    for (; k + kLanes <= k_end; k += kLanes) {
        F32x16 wv[NR];
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i) {
            wv[i] = load(w[i] + k);
            if constexpr (NT > 1) keep_in_registers(wv[i]);  // read once for the NT tokens
        }
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
            const F32x16 xv = load(x + j * cols + k);
#pragma GCC unroll 16
            for (int i = 0; i < NR; ++i) acc[i][j] = fma(wv[i], xv, acc[i][j]);
        }
    }
    if (k < k_end) {  // a partial last chunk (k_end = cols): lanes past it load zeros, fma(0, 0, acc)
        const int64_t left = k_end - k;
        F32x16 wv[NR];
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i) wv[i] = load_first(w[i] + k, left);
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
            const F32x16 xv = load_first(x + j * cols + k, left);
#pragma GCC unroll 16
            for (int i = 0; i < NR; ++i) acc[i][j] = fma(wv[i], xv, acc[i][j]);
        }
    }
    if (k_end < cols) {
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
            for (int j = 0; j < NT; ++j) park[i * NT + j] = acc[i][j];
        return;
    }
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) y[j * y_stride + i] = reduce_add(acc[i][j]);
}

using BufferedTileFn = void (*)(const float* const*, const float*, int64_t, int64_t, int64_t, F32x16*, float*, int64_t);

// The tiling for 8 F32x16 registers (AVX2's 16 ymm, NEON's 32 q): 6 rows × 1 token for one token (12 accumulator
// registers, the token's 2, the weights read from memory by the fma), 2 rows × 2 tokens for several (8 accumulator
// registers, 4 of weights, 2 of a token); 64 tokens per pass over a decoded row tile, whole rows (no column slices).
struct EightVectorTiling {
    static constexpr int kRowsOneToken = 6;
    static constexpr int kRows = 2;
    static constexpr int kTokens = 2;
    static constexpr int64_t kTokenBlock = 64;
    static constexpr int64_t kActivationBlockBytes = 0;
    static constexpr int64_t kColumnSlice = 0;
};

template <class Tiling>
inline constexpr int kMaxTileRows = std::max(Tiling::kRowsOneToken, Tiling::kRows);

// The tile of NR rows × NT tokens where the tiling uses one, else nullptr (not instantiated).
template <class Tiling, int NR, int NT>
constexpr BufferedTileFn tile_or_null() {
    if constexpr (NT == 1 || NR <= Tiling::kRows) {
        return &buffered_tile<NR, NT>;
    } else {
        return nullptr;
    }
}

// Entry (nr - 1) * kTokens + (nt - 1): the tile of nr rows × nt tokens.
template <class Tiling, int... I>
constexpr std::array<BufferedTileFn, sizeof...(I)> tile_table(std::integer_sequence<int, I...>) {
    return {tile_or_null<Tiling, I / Tiling::kTokens + 1, I % Tiling::kTokens + 1>()...};
}

// Rows [row_begin, row_end) of the product (MatmulArgs, matmul_impl.h) with the tiling of one ISA.
template <class Tiling>
void matmul_float_rows(const kernels::MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    constexpr int kMaxRows = kMaxTileRows<Tiling>;
    constexpr int kTokens = Tiling::kTokens;
    constexpr int kTileShapes = kMaxRows * kTokens;
    static constexpr std::array<BufferedTileFn, kTileShapes> kTiles =
        tile_table<Tiling>(std::make_integer_sequence<int, kTileShapes>{});
    const int max_rows = a.n_tokens == 1 ? Tiling::kRowsOneToken : Tiling::kRows;
    const bool direct = a.type == TensorType::F32;   // f32 rows are used in place
    thread_local kernels::ScratchArray decoded_buf;  // max_rows × cols, per worker
    float* decoded = direct ? nullptr : decoded_buf.floats(static_cast<size_t>(max_rows * a.cols));
    const float* w[kMaxRows];
    // Each token tile's accumulators between column slices (none without slices).
    constexpr bool kSliced = Tiling::kColumnSlice > 0;
    constexpr int64_t kParkedTiles = kSliced ? (Tiling::kTokenBlock + kTokens - 1) / kTokens : 1;
    alignas(64) F32x16 park[kParkedTiles][kTileShapes];
    int64_t token_block = Tiling::kTokenBlock;
    if constexpr (Tiling::kActivationBlockBytes > 0) {
        const int64_t fit = Tiling::kActivationBlockBytes / (4 * std::max<int64_t>(a.cols, 1)) / kTokens * kTokens;
        token_block = std::clamp<int64_t>(fit, kTokens, Tiling::kTokenBlock);
    }
    // Column slices of about kColumnSlice, equal (whole 16-column chunks); one for short rows or no slicing.
    const int64_t n_slices = kSliced ? std::max<int64_t>(1, a.cols / Tiling::kColumnSlice) : 1;
    const int64_t slice = ((a.cols + n_slices - 1) / n_slices + kLanes - 1) / kLanes * kLanes;
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += token_block) {
        const int64_t t_end = std::min(a.n_tokens, t0 + token_block);
        for (int64_t r = row_begin; r < row_end; r += max_rows) {
            const int nr = static_cast<int>(std::min<int64_t>(max_rows, row_end - r));
            for (int i = 0; i < nr; ++i) {
                const uint8_t* src = a.W + static_cast<uint64_t>(r + i) * a.row_bytes;
                if (direct) {
                    w[i] = reinterpret_cast<const float*>(src);
                } else {
                    float* dst = decoded + i * a.cols;
                    decode_half_row(a.type, src, dst, a.cols);
                    w[i] = dst;
                }
            }
            for (int64_t k0 = 0; k0 < a.cols; k0 += slice) {
                const int64_t k1 = std::min(a.cols, k0 + slice);
                int64_t tile_index = 0;
                for (int64_t t = t0; t < t_end; t += kTokens, ++tile_index) {
                    const int nt = static_cast<int>(std::min<int64_t>(kTokens, t_end - t));
                    const BufferedTileFn tile = kTiles[static_cast<size_t>((nr - 1) * kTokens + (nt - 1))];
                    F32x16* tile_park = park[kSliced ? tile_index : 0];
                    tile(w, a.X + t * a.cols, a.cols, k0, k1, tile_park, a.Y + t * a.y_stride + r, a.y_stride);
                }
            }
        }
    }
}

}  // namespace
}  // namespace kvstash::simd
