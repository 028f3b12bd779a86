// The AMX q8_0 prefill tiles (gemm_int8_amx.h). Compiled with AVX-512 F/BW/VL/DQ + VNNI + VBMI and AMX-TILE +
// AMX-INT8 (CMakeLists.txt: *_amx.cpp); run only where the dispatcher executed a tile product once and found it exact.
#pragma GCC optimize("fp-contract=off")  // float steps exactly as written (fma only where asked for)

#include "backends/cpu/matmul/gemm_int8_amx.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/matmul/gemm_int8.h"
#include "backends/cpu/matmul/matmul_int8_avx512vnni.h"  // <immintrin.h>, with GCC 12's false warnings off
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/matmul/repack_tiles.h"
#include "backends/cpu/runtime/scratch.h"

#if !defined(__AMX_TILE__) || !defined(__AMX_INT8__) || !defined(__AVX512VNNI__)
#error "gemm_int8_amx.cpp needs -mamx-tile -mamx-int8 and the AVX-512 VNNI flags (CMakeLists.txt: *_amx.cpp)"
#endif

namespace kvstash::kernels {
namespace {

constexpr int kTileRows = 32;       // weight rows of a repacked tile (two halves of 16: one int32 C-tile row each)
constexpr int kHalfRows = 16;       // C-tile columns: one per weight row of a half
constexpr int kTokenGroup = 16;     // tokens per tile product: A- and C-tile rows
constexpr int kBlock = 32;          // q8_0 block, activation block
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

// A token group's activations for one slice of columns, packed so that each tile load reads 512 contiguous bytes: per
// 32-column piece q of the chunk, the h plane's 16 rows × 32 bytes, then the l plane's (rows past the tokens: zeros).
// Read in place, the rows lie `cols` bytes apart (4,096 or 14,336 at the 8B shape): all 16 in one or two L1 sets, which
// hold 12 lines each.
constexpr int64_t kPackedPlane = kTokenGroup * kBlock;  // 512 bytes
constexpr int64_t kSliceCols = 256;                     // columns multiplied per token group at a time
constexpr int64_t kPackedPiece = 2 * kPackedPlane;

void pack_group(const QuantizedActivations& xa, int64_t t0, int nt, int64_t col0, int64_t pieces, int8_t* out) {
    for (int plane = 0; plane < 2; ++plane) {
        for (int j = 0; j < kTokenGroup; ++j) {
            int8_t* dst = out + plane * kPackedPlane + j * kBlock;
            if (j >= nt) {
                for (int64_t q = 0; q < pieces; ++q) std::memset(dst + q * kPackedPiece, 0, kBlock);
                continue;
            }
            const int8_t* src = (plane == 0 ? xa.h_row(t0 + j) : xa.l_row(t0 + j)) + col0;
            for (int64_t q = 0; q < pieces; ++q) {
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + q * kPackedPiece),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + q * kBlock)));
            }
        }
    }
}

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
            _mm512_storeu_ps(
                a, _mm512_fmadd_ps(_mm512_mul_ps(dw[v], x_scale), _mm512_cvtepi32_ps(sum), _mm512_loadu_ps(a)));
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

// q4_K: a repacked chunk (repack_tiles.h) as the tile products read it. quants: the nibbles split into bytes, each
// 32-element sub-block s of block b laid out as a q8_0 block is (slot ((b·8 + s)·8 + k)·2 + half of 64 bytes: dword k
// of 16 rows); the 6-bit scales and mins widened to int32, [b][s][32 rows]; d, dmin f32 [b][32 rows] in place.
struct Q4kChunk {
    uint8_t* quants = nullptr;
    int32_t *sc = nullptr, *mn = nullptr;
    const float *d = nullptr, *dmin = nullptr;
};

void prepare_q4_k(const uint8_t* chunk, int64_t nb, Q4kChunk& q) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    // Raw slot v = b·32 + g·8 + k: low nibbles are sub-block 2g's dword k, high ones sub-block 2g + 1's.
    for (int64_t v = 0; v < nb * 32; ++v) {
        const int64_t lo_slot = v / 32 * 64 + v % 32 / 8 * 16 + v % 8;
        for (int half = 0; half < 2; ++half) {
            const __m512i raw = _mm512_loadu_si512(chunk + (v * 2 + half) * 64);
            _mm512_storeu_si512(q.quants + (lo_slot * 2 + half) * 64, _mm512_and_si512(raw, low4));
            _mm512_storeu_si512(q.quants + ((lo_slot + 8) * 2 + half) * 64,
                                _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4));
        }
    }
    q.d = reinterpret_cast<const float*>(chunk + nb * 4096);
    q.dmin = q.d + nb * kTileRows;
    const auto* sc = reinterpret_cast<const int8_t*>(q.dmin + nb * kTileRows);
    const int64_t n = nb * 8 * kTileRows;
    for (int64_t i = 0; i < n; i += 16) {
        _mm512_storeu_si512(q.sc + i, _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + i))));
        _mm512_storeu_si512(q.mn + i,
                            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + n + i))));
    }
}

// One q4_K super-block (b in the chunk, bb absolute) for tokens t0 .. t0 + nt of a group whose planes start at h, l:
// per sub-block the four tile products, scaled in int32 (|sc · C| summed over 8 sub-blocks <= 8·63·32·127·15 < 2^31)
// into s[(half * 2 + plane) * 256 + token * 16 + row]; then the definition's float steps: S formed in int64 and rounded
// once (combine_planes_wide), acc = fma(fl(d·dx), S, acc), acc = fma(-fl(dmin·dx), M, acc) with M the mins times the
// plane sums of each sub-block (exact in int32, as the VNNI tiles form it).
void super_block_q4_k(const Q4kChunk& q, int64_t b, int64_t bb, const int8_t* act, const QuantizedActivations& xa,
                      int64_t t0, int nt, int32_t* c, int32_t* s, float* acc) {
    std::memset(s, 0, 4 * 256 * sizeof(int32_t));
    for (int sub = 0; sub < 8; ++sub) {
        const int8_t* a = act + sub * kPackedPiece;  // act: this super-block's packed activations
        multiply_block(a, a + kPackedPlane, kBlock, q.quants + (b * 8 + sub) * kBlockQuants, c);
        const int32_t* sc = q.sc + (b * 8 + sub) * kTileRows;
        for (int v = 0; v < 2; ++v) {
            const __m512i scale = _mm512_loadu_si512(sc + v * kHalfRows);
            for (int plane = 0; plane < 2; ++plane) {
                const int32_t* cp = c + (v * 2 + plane) * 256;
                int32_t* sp = s + (v * 2 + plane) * 256;
                for (int j = 0; j < nt; ++j) {
                    const __m512i prod = _mm512_mullo_epi32(_mm512_loadu_si512(cp + j * kHalfRows), scale);
                    _mm512_storeu_si512(sp + j * kHalfRows,
                                        _mm512_add_epi32(_mm512_loadu_si512(sp + j * kHalfRows), prod));
                }
            }
        }
    }
    for (int j = 0; j < nt; ++j) {
        const int64_t t = t0 + j;
        const __m512 x_scale = _mm512_set1_ps(xa.d_row(t)[bb]);
        const int32_t* sh = xa.h32_row(t) + bb * 8;
        const int32_t* sl = xa.l32_row(t) + bb * 8;
        for (int v = 0; v < 2; ++v) {
            float* a = acc + (t * 2 + v) * kHalfRows;
            const __m512 d = _mm512_loadu_ps(q.d + b * kTileRows + v * kHalfRows);
            const __m512i s_h = _mm512_loadu_si512(s + (v * 2) * 256 + j * kHalfRows);
            const __m512i s_l = _mm512_loadu_si512(s + (v * 2 + 1) * 256 + j * kHalfRows);
            __m512 sum = _mm512_fmadd_ps(_mm512_mul_ps(d, x_scale), int8_avx512::combine_planes_wide(s_h, s_l),
                                         _mm512_loadu_ps(a));
            __m512i m_h = _mm512_setzero_si512(), m_l = _mm512_setzero_si512();
            for (int sub = 0; sub < 8; ++sub) {
                const __m512i mn = _mm512_loadu_si512(q.mn + (b * 8 + sub) * kTileRows + v * kHalfRows);
                m_h = _mm512_add_epi32(m_h, _mm512_mullo_epi32(mn, _mm512_set1_epi32(sh[sub])));
                m_l = _mm512_add_epi32(m_l, _mm512_mullo_epi32(mn, _mm512_set1_epi32(sl[sub])));
            }
            const __m512i m = _mm512_add_epi32(_mm512_slli_epi32(m_h, 8), m_l);
            const __m512 dmin = _mm512_loadu_ps(q.dmin + b * kTileRows + v * kHalfRows);
            sum = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, x_scale), _mm512_cvtepi32_ps(m), sum);
            _mm512_storeu_ps(a, sum);
        }
    }
}

}  // namespace

bool amx_reads_repacked(TensorType type) { return type == TensorType::Q8_0 || type == TensorType::Q4_K; }

void gemm_repacked_rows_amx(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    const QuantizedActivations& xa = *a.xq;
    const bool q4_k = a.type == TensorType::Q4_K;
    const int64_t block = q4_k ? 256 : kBlock;
    const int64_t blocks = a.cols / block;
    const int64_t chunk_blocks = kRepackChunkCols / block;
    const uint64_t record = repacked_bytes_per_block(a.type);
    thread_local ScratchArray acc_buf, c_buf, s_buf, act_buf, split_buf, sc_buf, mn_buf;
    float* acc = acc_buf.floats(static_cast<size_t>(a.n_tokens * kTileRows));
    int32_t* c = c_buf.ints(4 * 256);
    int32_t* s = s_buf.ints(4 * 256);
    Q4kChunk q4;
    if (q4_k) {
        q4.quants = split_buf.bytes(static_cast<size_t>(chunk_blocks * 8 * kBlockQuants));
        q4.sc = sc_buf.ints(static_cast<size_t>(chunk_blocks * 8 * kTileRows));
        q4.mn = mn_buf.ints(static_cast<size_t>(chunk_blocks * 8 * kTileRows));
    }
    int8_t* act = reinterpret_cast<int8_t*>(act_buf.bytes(static_cast<size_t>(kSliceCols / kBlock * kPackedPiece)));
    const TileConfig config = kernel_config();
    _tile_loadconfig(&config);
    for (int64_t i = row_begin / kTileRows; i * kTileRows < row_end; ++i) {
        const int64_t r = i * kTileRows;
        const uint8_t* tile = a.tiles + static_cast<uint64_t>(i * blocks) * record;
        std::fill(acc, acc + a.n_tokens * kTileRows, 0.0f);
        for (int64_t b0 = 0; b0 < blocks; b0 += chunk_blocks) {
            // A chunk (repack_tiles.h), q8_0: the quants of its nb blocks (1,024 bytes each), then d[b][32 rows].
            const int64_t nb = std::min(chunk_blocks, blocks - b0);
            const uint8_t* chunk = tile + static_cast<uint64_t>(b0) * record;
            const auto* d = reinterpret_cast<const float*>(chunk + nb * kBlockQuants);
            if (q4_k) prepare_q4_k(chunk, nb, q4);
            // Slices of 256 columns (8 q8_0 blocks, 1 q4_K super-block): their weights (~9 KiB) and one token group's
            // packed activations (8 KiB) stay in L1 while the group passes; a whole chunk's (36 + 32 KiB) did not,
            // and the tile loads then came from L2 (measured: several times the tile products' own time).
            const int64_t slice_blocks = kSliceCols / block;
            for (int64_t s0 = 0; s0 < nb; s0 += slice_blocks) {
                const int64_t ns = std::min(slice_blocks, nb - s0);
                for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kTokenGroup) {
                    const int nt = static_cast<int>(std::min<int64_t>(kTokenGroup, a.n_tokens - t0));
                    pack_group(xa, t0, nt, (b0 + s0) * block, ns * block / kBlock, act);
                    memory_barrier();  // the packed (and split) bytes are in memory before the tile loads read them
                    for (int64_t b = s0; b < s0 + ns; ++b) {
                        if (q4_k) {
                            super_block_q4_k(q4, b, b0 + b, act + (b - s0) * 8 * kPackedPiece, xa, t0, nt, c, s, acc);
                            continue;
                        }
                        const int8_t* piece = act + (b - s0) * kPackedPiece;
                        multiply_block(piece, piece + kPackedPlane, kBlock, chunk + b * kBlockQuants, c);
                        accumulate_block(c, d + b * kTileRows, xa, b0 + b, t0, nt, acc);
                    }
                }
            }
        }
        store_rows(a, r, static_cast<int>(std::max<int64_t>(0, row_begin - r)),
                   static_cast<int>(std::min<int64_t>(kTileRows, row_end - r)), acc);
    }
    _tile_release();
}

void gemm_int8_rows_amx(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    if (a.tiles != nullptr && amx_reads_repacked(a.type) && a.n_tokens > int8_avx512::few_tokens_max_repacked(a.type)) {
        return gemm_repacked_rows_amx(a, row_begin, row_end);
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
