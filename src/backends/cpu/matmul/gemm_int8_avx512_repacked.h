// The 32-row tiles of gemm_int8_avx512_tiles.h read from weights repacked at load (repack_tiles.h) instead of
// unpacked and transposed from the file's layout on every call: per chunk q8_0 is read in place and the K-quants'
// transposed nibbles (q6_K: and its high bits) are split into the tile's bytes and their int8 scales widened to int32,
// a streaming pass with no transpose and no per-row scale unpacking. The chunk kernels and their arithmetic are the
// same, so the same bits. Include only from a file that includes gemm_int8_avx512_tiles.h's instruction-set files
// (gemm_int8_avx512*.cpp).
#pragma once
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/gemm_int8_avx512_tiles.h"
#include "backends/cpu/matmul/repack_tiles.h"

namespace kvstash::kernels {
namespace {
namespace gemm32 {

static_assert(kRepackTileRows == kTileRows && kRepackChunkCols == kChunkCols, "repack_tiles.h is this tile's layout");

// Whether this instruction set's tiles read repacked `type` (q8_0 without VNNI is multiplied as int16 tiles, which the
// repacked bytes are not; q4_0 / q4_1 have a chunk kernel with VNNI only: repack_tiles.h, matmul_reads_repacked).
bool reads_repacked(TensorType type) {
    switch (type) {
        case TensorType::Q4_K:
        case TensorType::Q6_K: return true;
        case TensorType::Q8_0:
        case TensorType::Q4_0:
        case TensorType::Q4_1: return kDotVnni;
        default: return false;
    }
}

inline __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline void store512(uint8_t* p, __m512i v) { _mm512_storeu_si512(p, v); }

// n (a multiple of 16) int8 scales or mins widened into int32 (the chunk kernels' scale vectors).
const int32_t* widen(const int8_t* src, int64_t n, int32_t* dst) {
    for (int64_t i = 0; i < n; i += 16) {
        _mm512_storeu_si512(dst + i, _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
    return dst;
}

// n (a multiple of 16) fp16 scales widened into f32, exactly (the chunk kernels' scale vectors).
const float* widen_fp16(const uint8_t* src, int64_t n, float* dst) {
    for (int64_t i = 0; i < n; i += 16) {
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i))));
    }
    return dst;
}

// Blocks [0, nb) of the repacked chunk at `chunk` as the chunk kernels read it; t: where the split bytes go.
TileView repacked_view(TensorType type, const uint8_t* chunk, int64_t nb, Tile& t) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    auto slot = [](int64_t dword, int half) { return (dword * 2 + half) * 64; };  // a vector of 16 rows' dword
    if (type == TensorType::Q4_0 || type == TensorType::Q4_1) {  // raw nibbles, split by chunk_q4 in registers
        const uint8_t* scales = chunk + nb * 512;
        const float* m =
            type == TensorType::Q4_1 ? widen_fp16(scales + nb * kTileRows * 2, nb * kTileRows, t.m) : nullptr;
        return {chunk, widen_fp16(scales, nb * kTileRows, t.d), m, nullptr, nullptr};
    }
    if (type == TensorType::Q8_0) {
        return {chunk, reinterpret_cast<const float*>(chunk + nb * 1024), nullptr, nullptr, nullptr};
    }
    if (type == TensorType::Q4_K) {
        // Raw dword (g, k): low nibbles are the tile's dword 16g + k of the super-block, high ones 16g + 8 + k.
        for (int64_t v = 0; v < nb * 32; ++v) {
            const int64_t dword = v / 32 * 64 + v % 32 / 8 * 16 + v % 8;
            for (int half = 0; half < 2; ++half) {
                const __m512i raw = load512(chunk + slot(v, half));
                store512(t.packed + slot(dword, half), _mm512_and_si512(raw, low4));
                store512(t.packed + slot(dword + 8, half), _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4));
            }
        }
        const auto* d = reinterpret_cast<const float*>(chunk + nb * 4096);
        const auto* sc = reinterpret_cast<const int8_t*>(d + 2 * nb * kTileRows);
        const int64_t n_sc = nb * 8 * kTileRows;
        return {t.packed, d, d + nb * kTileRows, widen(sc, n_sc, t.sc), widen(sc + n_sc, n_sc, t.mn)};
    }
    // q6_K: element 128h + 32m + 4k + j of a super-block = (ql nibble) | (2 bits of qh) << 4, as unpack_row builds it.
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    const uint8_t* ql = chunk;
    const uint8_t* qh = chunk + nb * 4096;
    for (int64_t b = 0; b < nb; ++b) {
        for (int h = 0; h < 2; ++h) {
            for (int k = 0; k < 8; ++k) {
                const int64_t dword = b * 64 + h * 32 + k;
                for (int half = 0; half < 2; ++half) {
                    const __m512i ql0 = load512(ql + slot(b * 32 + h * 16 + k, half));
                    const __m512i ql1 = load512(ql + slot(b * 32 + h * 16 + 8 + k, half));
                    const __m512i hi = load512(qh + slot(b * 16 + h * 8 + k, half));
                    store512(t.packed + slot(dword, half),
                             _mm512_or_si512(_mm512_and_si512(ql0, low4),
                                             _mm512_and_si512(_mm512_slli_epi16(hi, 4), bits45)));
                    store512(t.packed + slot(dword + 8, half),
                             _mm512_or_si512(_mm512_and_si512(ql1, low4),
                                             _mm512_and_si512(_mm512_slli_epi16(hi, 2), bits45)));
                    store512(t.packed + slot(dword + 16, half),
                             _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), low4),
                                             _mm512_and_si512(hi, bits45)));
                    store512(t.packed + slot(dword + 24, half),
                             _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), low4),
                                             _mm512_and_si512(_mm512_srli_epi16(hi, 2), bits45)));
                }
            }
        }
    }
    const auto* d = reinterpret_cast<const float*>(chunk + nb * 6144);
    return {t.packed, d, nullptr, widen(reinterpret_cast<const int8_t*>(d + nb * kTileRows), nb * 16 * kTileRows, t.sc),
            nullptr};
}

// Rows [row_begin, row_end) from the repacked tiles at a.tiles: every 32-row tile that holds one of them, whole (a
// range that starts or ends inside a tile multiplies all its rows and stores its own).
void repacked_tile_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const int64_t blocks = a.cols / tensor_type_traits(a.type).block_size;
    const int64_t chunk_blocks = kChunkCols / tensor_type_traits(a.type).block_size;
    const uint64_t record = repacked_bytes_per_block(a.type);
    thread_local Tile tile_storage;
    thread_local ScratchArray acc_buf;
    Tile& tile = tile_storage;
    tile.reserve();
    float* acc = acc_buf.floats(static_cast<size_t>(a.n_tokens * kTileRows));
    const auto tile_at = [&](int64_t i) { return a.tiles + static_cast<uint64_t>(i * blocks) * record; };
    for (int64_t i = row_begin / kTileRows; i * kTileRows < row_end; ++i) {
        const int64_t r = i * kTileRows;
        std::fill(acc, acc + a.n_tokens * kTileRows, 0.0f);
        for (int64_t b0 = 0; b0 < blocks; b0 += chunk_blocks) {
            const int64_t nb = std::min(chunk_blocks, blocks - b0);
            const TileView view = repacked_view(a.type, tile_at(i) + static_cast<uint64_t>(b0) * record, nb, tile);
            NextChunk next;  // the next chunk, or the next tile's first
            if (b0 + nb < blocks) {
                next.set_range(tile_at(i) + static_cast<uint64_t>(b0 + nb) * record,
                               static_cast<uint64_t>(std::min(chunk_blocks, blocks - b0 - nb)) * record);
            } else if (r + kTileRows < row_end) {
                next.set_range(tile_at(i + 1), static_cast<uint64_t>(std::min(chunk_blocks, blocks)) * record);
            }
            multiply_chunk(a, view, b0, nb, next, acc);
        }
        store_rows(a, r, static_cast<int>(std::max<int64_t>(0, row_begin - r)),
                   static_cast<int>(std::min<int64_t>(kTileRows, row_end - r)), acc);
    }
}

// Rows [row_begin, row_end) on the 32-row tiles (has_tiles(a.type), or repacked weights given and readable): from the
// repacked weights where given and readable.
void tiles_any_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.tiles != nullptr && reads_repacked(a.type)) return repacked_tile_rows(a, row_begin, row_end);
    tile_rows(a, row_begin, row_end);
}

}  // namespace gemm32
}  // namespace
}  // namespace kvstash::kernels
