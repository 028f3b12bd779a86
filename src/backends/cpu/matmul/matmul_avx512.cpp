// AVX-512 matmul with f32 activations. matmul() uses it for the float weight types (f32, f16, bf16); the
// block-quantized types take integer activations on every path (matmul_int8_avx512vnni.cpp, or the AVX2
// integer kernels without VNNI), and their decoders (matmul_avx512_blocks.h) serve kernel tests only.
// A tile of rows is decoded once into an L1-resident f32 buffer (f32 rows are read in place), then reused by
// every token of a 64-token block with a register tile of 4 rows × 6 tokens.
//
// Reduction order of one dot product Y[t][r]: the canonical 16-lane one of the scalar reference
// (reference/matmul_ref.cpp, docs/architecture/canonical-matmul.md), the same in every tile shape:
//   acc (16 lanes) = 0; for k = 0, 16, 32, ...: acc = fma(w[k..k+15], x[k..k+15], acc)
//   (a partial last chunk is loaded masked, zeros beyond cols); result = hsum16(acc) (fixed tree).
#pragma GCC optimize("fp-contract=off")  // decode arithmetic exactly as written, never fused implicitly

#include <algorithm>

#include "backends/cpu/matmul/matmul_avx512_blocks.h"
#include "backends/cpu/runtime/scratch.h"

namespace kvstash::kernels {
namespace {

constexpr int kRowTile = 4;                        // rows per register tile (and per decoded buffer)
constexpr int kTokenTile = 6;                      // tokens per register tile (4 × 6 accumulators)
constexpr int64_t kTokenBlock = 64;                // most tokens per pass over a decoded row tile
constexpr int64_t kActivationBlockBytes = 786432;  // activations of one pass (kept in L2)
constexpr int64_t kColumnSlice = 512;              // columns per pass of the token tiles over a row tile

// ---- buffered tile: NR decoded f32 rows × NT tokens ----

// Columns [k_begin, k_end) of y[j * y_stride + i] = dot(w[i], x + j * cols) for i < NR, j < NT: the
// accumulators start at zero for k_begin = 0, else from `park` (where the previous slice left them), and
// are summed into y after the last slice (k_end = cols), else parked. Parking a vector is exact, so the
// FMA sequence of every output is the same as in one pass over all columns; slicing keeps the row
// tile's slice (NR × 2 KiB) in L1 while the token tiles stream past it.
template <int NR, int NT>
void buffered_tile(const float* const* w, const float* x, int64_t cols, int64_t k_begin, int64_t k_end, __m512* park,
                   float* y, int64_t y_stride) {
    __m512 acc[NR][NT];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j)
            acc[i][j] =
                k_begin == 0 ? _mm512_setzero_ps() : _mm512_load_ps(reinterpret_cast<const float*>(park + i * NT + j));
    int64_t k = k_begin;
    for (; k + 16 <= k_end; k += 16) {
        __m512 wv[NR];
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i) wv[i] = _mm512_loadu_ps(w[i] + k);
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
            const __m512 xv = _mm512_loadu_ps(x + j * cols + k);
#pragma GCC unroll 16
            for (int i = 0; i < NR; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k < k_end) {  // a partial last chunk (k_end = cols)
        const __mmask16 mask = static_cast<__mmask16>((1u << (k_end - k)) - 1);
        __m512 wv[NR];
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i) wv[i] = _mm512_maskz_loadu_ps(mask, w[i] + k);
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
            const __m512 xv = _mm512_maskz_loadu_ps(mask, x + j * cols + k);
#pragma GCC unroll 16
            for (int i = 0; i < NR; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k_end < cols) {
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
            for (int j = 0; j < NT; ++j) _mm512_store_ps(reinterpret_cast<float*>(park + i * NT + j), acc[i][j]);
        return;
    }
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) y[j * y_stride + i] = hsum16(acc[i][j]);
}

using BufferedTileFn = void (*)(const float* const*, const float*, int64_t, int64_t, int64_t, __m512*, float*, int64_t);

template <int NR>
BufferedTileFn buffered_tile_for_tokens(int nt) {
    static_assert(kTokenTile == 6);
    switch (nt) {
        case 1: return &buffered_tile<NR, 1>;
        case 2: return &buffered_tile<NR, 2>;
        case 3: return &buffered_tile<NR, 3>;
        case 4: return &buffered_tile<NR, 4>;
        case 5: return &buffered_tile<NR, 5>;
        default: return &buffered_tile<NR, 6>;
    }
}

BufferedTileFn buffered_tile_for(int nr, int nt) {
    static_assert(kRowTile == 4);
    switch (nr) {
        case 1: return buffered_tile_for_tokens<1>(nt);
        case 2: return buffered_tile_for_tokens<2>(nt);
        case 3: return buffered_tile_for_tokens<3>(nt);
        default: return buffered_tile_for_tokens<4>(nt);
    }
}

void buffered_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const bool direct = a.type == TensorType::F32;  // f32 rows are used in place
    thread_local ScratchArray decoded_buf;          // kRowTile × cols, per worker
    float* decoded = direct ? nullptr : decoded_buf.floats(static_cast<size_t>(kRowTile * a.cols));
    const float* w[kRowTile];
    // Each token tile's accumulators between column slices.
    alignas(64) __m512 park[(kTokenBlock + kTokenTile - 1) / kTokenTile][kRowTile * kTokenTile];
    // Tokens per pass over a decoded row tile: as many as keep their activations (token_block × cols
    // floats) within kActivationBlockBytes, so that they stay in L2, up to kTokenBlock.
    const int64_t fit = kActivationBlockBytes / (4 * std::max<int64_t>(a.cols, 1)) / kTokenTile * kTokenTile;
    const int64_t token_block = std::clamp<int64_t>(fit, kTokenTile, kTokenBlock);
    // Column slices of about kColumnSlice, equal (whole 16-column chunks), one for short rows.
    const int64_t n_slices = std::max<int64_t>(1, a.cols / kColumnSlice);
    const int64_t slice = ((a.cols + n_slices - 1) / n_slices + 15) / 16 * 16;
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += token_block) {
        const int64_t t_end = std::min(a.n_tokens, t0 + token_block);
        for (int64_t r = row_begin; r < row_end; r += kRowTile) {
            const int nr = static_cast<int>(std::min<int64_t>(kRowTile, row_end - r));
            for (int i = 0; i < nr; ++i) {
                const uint8_t* src = a.W + static_cast<uint64_t>(r + i) * a.row_bytes;
                if (direct) {
                    w[i] = reinterpret_cast<const float*>(src);
                } else {
                    float* dst = decoded + i * a.cols;
                    decode_row(a.type, src, dst, a.cols);
                    w[i] = dst;
                }
            }
            for (int64_t k0 = 0; k0 < a.cols; k0 += slice) {
                const int64_t k1 = std::min(a.cols, k0 + slice);
                int tile_index = 0;
                for (int64_t t = t0; t < t_end; t += kTokenTile, ++tile_index) {
                    const int nt = static_cast<int>(std::min<int64_t>(kTokenTile, t_end - t));
                    buffered_tile_for(nr, nt)(w, a.X + t * a.cols, a.cols, k0, k1, park[tile_index],
                                              a.Y + t * a.y_stride + r, a.y_stride);
                }
            }
        }
    }
}

}  // namespace

void matmul_rows_avx512(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    buffered_rows(a, row_begin, row_end);
}

}  // namespace kvstash::kernels
