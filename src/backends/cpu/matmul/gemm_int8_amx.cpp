// The AMX q8_0 prefill tiles (gemm_int8_amx.h). Compiled with AVX-512 F/BW/VL/DQ + VNNI + VBMI and AMX-TILE +
// AMX-INT8 (CMakeLists.txt: *_amx.cpp); run only where the dispatcher executed a tile product once and found it exact.
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/gemm_int8_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/matmul/gemm_int8.h"
#include "backends/cpu/matmul/matmul_int8_avx512vnni.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/matmul/repack_tiles.h"
#include "backends/cpu/runtime/scratch.h"

#if !defined(__AMX_TILE__) || !defined(__AMX_INT8__) || !defined(__AVX512VNNI__)
#error "gemm_int8_amx.cpp needs -mamx-tile -mamx-int8 and the AVX-512 VNNI flags (CMakeLists.txt: *_amx.cpp)"
#endif

namespace kvstash::kernels {
namespace {

constexpr int kTileRows = 32;     // weight rows of a repacked tile (two halves of 16: one int32 C-tile row each)
constexpr int kHalfRows = 16;     // C-tile columns: one per weight row of a half
constexpr int kTokenGroup = 16;   // tokens per tile product: A- and C-tile rows
constexpr int kBlock = 32;        // q8_0 block, activation block
constexpr int kBlockQuants = 1024;  // repacked quant bytes of one block of a 32-row tile (repack_tiles.h)
constexpr int kWeightStride = 128;  // bytes between the 64-byte dword rows of one half (the two halves interleave)
static_assert(kRepackTileRows == kTileRows, "repack_tiles.h's tiles are this kernel's");

// LDTILECFG's 64-byte operand (palette 1): bytes per row and rows of each of the 8 tile registers.
struct alignas(64) TileConfig {
    uint8_t palette_id = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// tmm0, tmm1: activation planes h, l (16 tokens × 32 signed bytes); tmm2, tmm3: weights of rows 0-15, 16-31 (8 dword
// rows × 64 unsigned bytes); tmm4..tmm7: C for (h, half 0), (l, half 0), (h, half 1), (l, half 1), 16 × 16 int32.
TileConfig kernel_config() {
    TileConfig c;
    for (int t = 0; t < 2; ++t) {
        c.rows[t] = kTokenGroup;
        c.colsb[t] = kBlock;
    }
    for (int t = 2; t < 4; ++t) {
        c.rows[t] = kBlock / 4;
        c.colsb[t] = 64;
    }
    for (int t = 4; t < 8; ++t) {
        c.rows[t] = kTokenGroup;
        c.colsb[t] = 64;
    }
    return c;
}

// Compiler barrier: tileloadd's asm (GCC's amxtileintrin.h) declares no memory input, so stores to the bytes it
// reads must not be moved past it.
inline void memory_barrier() { asm volatile("" ::: "memory"); }

// The four C tiles of one block and one token group: c[(half * 2 + plane) * 256 + token * 16 + row].
inline void multiply_block(const int8_t* h, const int8_t* l, int64_t act_stride, const uint8_t* quants, int32_t* c) {
    _tile_loadd(0, h, act_stride);
    _tile_loadd(1, l, act_stride);
    _tile_loadd(2, quants, kWeightStride);
    _tile_loadd(3, quants + 64, kWeightStride);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    _tile_dpbsud(4, 0, 2);
    _tile_dpbsud(5, 1, 2);
    _tile_dpbsud(6, 0, 3);
    _tile_dpbsud(7, 1, 3);
    _tile_stored(4, c, 64);
    _tile_stored(5, c + 256, 64);
    _tile_stored(6, c + 512, 64);
    _tile_stored(7, c + 768, 64);
}

// The float steps of block `b` (absolute) for tokens t0 .. t0 + nt of one group: acc[(t * 2 + half) * 16 + row].
inline void accumulate_block(const int32_t* c, const float* d, const QuantizedActivations& xa, int64_t b, int64_t t0,
                             int nt, float* acc) {
    const __m512 dw[2] = {_mm512_loadu_ps(d), _mm512_loadu_ps(d + kHalfRows)};
    for (int j = 0; j < nt; ++j) {
        const int64_t t = t0 + j;
        const __m512i h_offset = _mm512_set1_epi32(xa.h32_row(t)[b] << 7);  // weights stored as w + 128
        const __m512i l_offset = _mm512_set1_epi32(xa.l32_row(t)[b] << 7);
        const __m512 x_scale = _mm512_set1_ps(xa.d_row(t)[b]);
        for (int v = 0; v < 2; ++v) {
            const __m512i c_h = _mm512_loadu_si512(c + (v * 2) * 256 + j * kHalfRows);
            const __m512i c_l = _mm512_loadu_si512(c + (v * 2 + 1) * 256 + j * kHalfRows);
            // |256·S_h + S_l| <= 32·128·32639 < 2^31: exact in int32 (the definition's S_b).
            const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_sub_epi32(c_h, h_offset), 8),
                                                 _mm512_sub_epi32(c_l, l_offset));
            float* a = acc + (t * 2 + v) * kHalfRows;
            _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_mul_ps(dw[v], x_scale), _mm512_cvtepi32_ps(sum),
                                                _mm512_loadu_ps(a)));
        }
    }
}

// The outputs of rows r + [lo, hi) (0 <= lo < hi <= 32) of the tile at row r, every token.
void store_rows(const MatmulArgs& a, int64_t r, int lo, int hi, const float* acc) {
    for (int v = 0; v < 2; ++v) {
        const int first = std::clamp(lo - v * kHalfRows, 0, kHalfRows);
        const int end = std::clamp(hi - v * kHalfRows, 0, kHalfRows);
        if (first >= end) continue;
        const auto mask = static_cast<__mmask16>(((1u << end) - 1) & ~((1u << first) - 1));
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            _mm512_mask_storeu_ps(a.Y + t * a.y_stride + r + v * kHalfRows, mask,
                                  _mm512_loadu_ps(acc + (t * 2 + v) * kHalfRows));
        }
    }
}

}  // namespace

void gemm_q8_0_rows_amx(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const QuantizedActivations& xa = *a.xq;
    const int64_t blocks = a.cols / kBlock;
    const int64_t chunk_blocks = kRepackChunkCols / kBlock;
    const uint64_t record = repacked_bytes_per_block(TensorType::Q8_0);
    const int64_t full_groups = a.n_tokens / kTokenGroup;
    const int tail = static_cast<int>(a.n_tokens % kTokenGroup);
    thread_local ScratchArray acc_buf, c_buf, tail_h_buf, tail_l_buf;
    float* acc = acc_buf.floats(static_cast<size_t>(a.n_tokens * kTileRows));
    int32_t* c = c_buf.ints(4 * 256);
    // The last tokens (fewer than a group) as a zero-padded group of their own: the tile loads read 16 rows.
    int8_t* tail_h = nullptr;
    int8_t* tail_l = nullptr;
    if (tail != 0) {
        const auto bytes = static_cast<size_t>(kTokenGroup * a.cols);
        tail_h = reinterpret_cast<int8_t*>(tail_h_buf.bytes(bytes));
        tail_l = reinterpret_cast<int8_t*>(tail_l_buf.bytes(bytes));
        const auto used = static_cast<size_t>(tail * a.cols);
        std::memcpy(tail_h, xa.h_row(full_groups * kTokenGroup), used);
        std::memcpy(tail_l, xa.l_row(full_groups * kTokenGroup), used);
        std::memset(tail_h + used, 0, bytes - used);
        std::memset(tail_l + used, 0, bytes - used);
        memory_barrier();
    }
    const TileConfig config = kernel_config();
    _tile_loadconfig(&config);
    for (int64_t i = row_begin / kTileRows; i * kTileRows < row_end; ++i) {
        const int64_t r = i * kTileRows;
        const uint8_t* tile = a.tiles + static_cast<uint64_t>(i * blocks) * record;
        std::fill(acc, acc + a.n_tokens * kTileRows, 0.0f);
        for (int64_t b0 = 0; b0 < blocks; b0 += chunk_blocks) {
            // A chunk (repack_tiles.h): quants of its nb blocks (1,024 bytes each), then their scales d[b][32 rows].
            const int64_t nb = std::min(chunk_blocks, blocks - b0);
            const uint8_t* chunk = tile + static_cast<uint64_t>(b0) * record;
            const auto* d = reinterpret_cast<const float*>(chunk + nb * kBlockQuants);
            for (int64_t g = 0; g * kTokenGroup < a.n_tokens; ++g) {
                const int64_t t0 = g * kTokenGroup;
                const bool padded = g == full_groups;
                const int nt = padded ? tail : kTokenGroup;
                const int8_t* h = padded ? tail_h : xa.h_row(t0);
                const int8_t* l = padded ? tail_l : xa.l_row(t0);
                for (int64_t b = 0; b < nb; ++b) {
                    const int64_t col = (b0 + b) * kBlock;
                    multiply_block(h + col, l + col, a.cols, chunk + b * kBlockQuants, c);
                    accumulate_block(c, d + b * kTileRows, xa, b0 + b, t0, nt, acc);
                }
            }
        }
        store_rows(a, r, static_cast<int>(std::max<int64_t>(0, row_begin - r)),
                   static_cast<int>(std::min<int64_t>(kTileRows, row_end - r)), acc);
    }
    _tile_release();
}

void gemm_int8_rows_amx(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.type == TensorType::Q8_0 && a.tiles != nullptr && a.n_tokens > int8_avx512::few_tokens_max_repacked(a.type)) {
        return gemm_q8_0_rows_amx(a, row_begin, row_end);
    }
    gemm_int8_rows_avx512vnni(a, row_begin, row_end);
}

bool amx_tile_product_is_exact() {
    // The kernel's own operand shapes and strides: A 16 × 32 signed bytes (row stride 48), B 8 × 64 unsigned bytes
    // (row stride 128), C 16 × 16 int32.
    alignas(64) int8_t a[16 * 48];
    alignas(64) uint8_t b[8 * 128];
    alignas(64) int32_t c[16 * 16];
    for (int i = 0; i < 16 * 48; ++i) a[i] = static_cast<int8_t>((i * 37 + 11) & 0xFF);
    for (int i = 0; i < 8 * 128; ++i) b[i] = static_cast<uint8_t>((i * 53 + 7) & 0xFF);
    TileConfig config;
    config.rows[0] = 16;
    config.colsb[0] = 64;
    config.rows[1] = 16;
    config.colsb[1] = 32;
    config.rows[2] = 8;
    config.colsb[2] = 64;
    memory_barrier();
    _tile_loadconfig(&config);
    _tile_zero(0);
    _tile_loadd(1, a, 48);
    _tile_loadd(2, b, 128);
    _tile_dpbsud(0, 1, 2);
    _tile_stored(0, c, 64);
    _tile_release();
    for (int m = 0; m < 16; ++m) {
        for (int n = 0; n < 16; ++n) {
            int32_t want = 0;
            for (int k = 0; k < 32; ++k) want += a[m * 48 + k] * b[(k / 4) * 128 + 4 * n + k % 4];
            if (want != c[m * 16 + n]) return false;
        }
    }
    return true;
}

}  // namespace kvstash::kernels
