// Weights repacked at load for the prefill GEMM's 32-row tiles (gemm_int8_avx512_tiles.h): kept in memory beside the
// mapped file (which decode and every other path still read), never written to a file.
//
// Why. The 32-row tiles unpack each 32-row × 1,024-column chunk of a q4_K / q6_K / q8_0 matrix from its file layout
// into L1 on every call: per row the scales and mins (6-bit fields, unpacked one by one), the quants split into
// bytes, then an 8 × 8 dword transpose so that dword k of 16 rows fills one vector. That work is paid once per call
// and amortized over the call's tokens only: small at 512 tokens, large for chunked prefill and speculative
// verification batches. Here the transpose and the scale unpacking are done once, at load; per call only a
// streaming nibble split remains (q8_0: nothing, the tile is read in place). q4_0 / q4_1 have no unrepacked 32-row
// tile (the 16-row tiles of matmul_int8_avx512_tiles.h take them from the file's layout); repacked, the 32-row tiles
// take them with their nibbles split in registers.
//
// The layout keeps the bytes of the file per weight (4 bits stay 4 bits): ~1.0-1.06× the file's bytes of the
// matrices it covers (docs/benchmarks.md has the numbers). Per 32-row tile (rows past the matrix: zero weights and
// scales) and per block b, a record of bytes_per_block(type); the records of a tile's 1,024-column chunk
// (blocks [b0, b0 + nb)) are one contiguous range, laid out by sections, each for all nb blocks in order:
//   q4_0 / q4_1: raw quant bytes qs[4k + j] at ((b·4 + k)·2 + half)·64 + 4·lane + j (low nibble: element 4k + j,
//          high: 16 + 4k + j) | d: fp16 [b][32 rows] | q4_1's m: fp16 [b][32] (exactly the file's bytes)
//   q8_0:  quants (q + 128) as ((b·8 + k)·2 + half)·64 + 4·lane + j = byte 4k + j of row 16·half + lane (exactly the
//          tile's transposed bytes) | d: f32 [b][32 rows]
//   q4_K:  raw quant bytes qs[32g + 4k + j] at ((b·32 + g·8 + k)·2 + half)·64 + 4·lane + j (low nibble: element
//          64g + 4k + j, high: 64g + 32 + 4k + j) | d, dmin: f32 [b][32] each | scales, mins: int8 [b][8][32] each
//   q6_K:  ql[64h + 32s + 4k + j] at ((b·32 + h·16 + s·8 + k)·2 + half)·64 + 4·lane + j | qh[32h + 4k + j] at
//          ((b·16 + h·8 + k)·2 + half)·64 + 4·lane + j | d: f32 [b][32] | scales: int8 [b][16][32]
// Every value is the file's own (fp16 scales kept, or widened to f32 exactly), so a product over it is the same
// integers and the same float steps: bitwise the scalar definition.
#pragma once

#include <cstdint>

#include "backends/cpu/runtime/dispatch.h"
#include "format/tensor_type.h"

namespace kvstash::kernels {

constexpr int64_t kRepackTileRows = 32;
constexpr int64_t kRepackChunkCols = 1024;

// Whether `type` has a repacked layout at all (q4_0, q4_1, q8_0, q4_K, q6_K).
bool has_repacked_layout(TensorType type);

// Whether matmul on `isa` reads repacked tiles of `type` in this process: the AVX-512 path's 32-row tiles (q8_0 only
// with VNNI: without it the tiles hold q8_0 as int16; q4_0 / q4_1 only with VNNI: without it they stay on the 16-row
// tiles, whose DotRun needs half the registers), and KVSTASH_REPACK is not "off" (read once: one binary
// measures both). Where false, repacking would only cost memory.
bool matmul_reads_repacked(Isa isa, TensorType type);

// Bytes of one block's record (a multiple of 64) and of a whole repacked rows × cols matrix.
uint64_t repacked_bytes_per_block(TensorType type);
uint64_t repacked_bytes(TensorType type, int64_t rows, int64_t cols);

// Writes the repacked layout of W (rows × cols, the file's row-major blocks) to out (repacked_bytes(...) bytes, best
// 64-byte aligned). Only for has_repacked_layout(type).
void repack_tiles(TensorType type, const void* W, int64_t rows, int64_t cols, uint8_t* out);

}  // namespace kvstash::kernels
