// The layers' matrices (and a q4_0 / q4_1 / q8_0 output matrix) repacked at load for the CPU's many-token tiles
// (backends/cpu/matmul/repack_tiles.h): where this process's kernels read that layout, each such MatrixRef gets
// `tiles`, owned by ModelWeights::tiles.
#pragma once

#include "kvstash/model.h"
#include "model/weights.h"

namespace kvstash {

// Repacks what this process's path reads repacked (AVX-512: q4_K, q6_K; q4_0, q4_1, q8_0 with VNNI), unless
// KVSTASH_REPACK=off,
// a device backend computes, or the copy would not fit beside the mapped weights in the memory available (then none,
// and w.tiles_left_out says how many bytes it would have taken). Fills w.tiles, w.tile_bytes, w.tile_seconds.
// options.n_threads threads repack (0: one per hardware thread); options.on_progress hears how far (kvstash/model.h).
void repack_for_prefill(ModelWeights& w, const ModelLoadOptions& options);

}  // namespace kvstash
