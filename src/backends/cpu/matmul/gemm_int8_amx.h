// Prefill GEMM of q8_0 and q4_K weights on Intel AMX (AMX-TILE + AMX-INT8: Sapphire Rapids and later), bitwise the
// scalar definition (reference/matmul_int8_ref.cpp), compiled in gemm_int8_amx.cpp with the AVX-512 VNNI flags and
// -mamx-tile -mamx-int8. Called only where cpu_supports_amx() (backends/cpu/runtime/amx.h) found that the CPU runs a
// tile product exactly, and KVSTASH_ISA=amx (opt-in: not faster than the VNNI tiles where measured,
// docs/benchmarks.md).
//
// The arithmetic. Per 32-element block b the definition needs S_b = 256·Σ w·h + Σ w·l exactly (w: the int8 weights,
// h, l: the two int8 planes of the 16-bit activations, quantize_act.h). One TDPBSUD multiplies a 16-token × 32-byte
// tile of one activation plane (signed bytes, as stored: row t = token t's block b) by an 8 × 64-byte tile of the
// weights repacked at load (repack_tiles.h: unsigned bytes w + 128, 4 bytes of each of 16 rows per 64-byte row of the
// tile, exactly TDPBSUD's layout of its second operand) into a 16 × 16 int32 tile: C[t][r] = Σ plane·(w + 128), exact
// (|C| <= 32·128·255). Four of them per block (two planes × two 16-row halves of the 32-row tile) are stored to L1,
// and then, per token and row, as in the VNNI tiles (gemm_int8_avx512_tiles.h, chunk_q8_0):
//     S = ((C_h - 128·Σh) << 8) + (C_l - 128·Σl)             (the plane sums of the block: QuantizedActivations)
//     acc = fma(fl(d · dx_b), float(S), acc)                   (block order, one accumulator per output)
// q4_K (256-element super-blocks of 8 sub-blocks of 32): the repacked nibbles are split into bytes once per chunk
// (0..15: no offset), each sub-block is one K = 32 tile product per plane and half, scaled by its 6-bit scale in int32;
// then the definition's super-block steps (S formed in int64 and rounded once; the mins' term), as the VNNI tiles.
// The same integers and the same float steps: the same bits, for every token count (tokens past the last full group
// of 16 are multiplied from zero rows of the packed activations; each output row of a tile product depends on its own
// token's row only), every row range (a range cut inside a 32-row tile multiplies the whole tile and stores its own
// rows) and every thread split.
#pragma once

#include <cstdint>

#include "backends/cpu/matmul/matmul_impl.h"

namespace kvstash::kernels {

// The integer-activation kernel of the dispatch table on the AMX path (KVSTASH_ISA=amx): q8_0 and q4_K matrices
// repacked at load (args.tiles) with more than few_tokens_max_repacked(type) tokens on the tiles below; everything else
// on gemm_int8_rows_avx512vnni (gemm_int8.h), the same bits.
void gemm_int8_rows_amx(const MatmulArgs& args, int64_t row_begin, int64_t row_end);

// The types the AMX tiles multiply from their repacked layout: q8_0, q4_K.
bool amx_reads_repacked(TensorType type);
// Rows [row_begin, row_end) of a product on AMX tiles, for any n_tokens >= 1: args.type amx_reads_repacked, args.tiles
// the matrix repacked by repack_tiles, args.xq its activations. For the tests, which call it directly.
void gemm_repacked_rows_amx(const MatmulArgs& args, int64_t row_begin, int64_t row_end);

// Loads a tile configuration, multiplies one 16 × 32 signed-byte tile by an 8 × 64 unsigned-byte tile (TDPBSUD, with
// the strides the kernel uses), stores the 16 × 16 int32 result and releases the tiles; whether every element equals
// the scalar sum. Executes AMX instructions: call only after the kernel granted this process the tile data state
// (arch_prctl ARCH_REQ_XCOMP_PERM), under a SIGILL / SIGSEGV handler (runtime/amx_detect.cpp).
bool amx_tile_product_is_exact();

}  // namespace kvstash::kernels
