// The CPU's embedding op (Backend::embed): each row's token embedding decoded from the model's table in
// its own element type, plus its learned position embedding (gpt2), times embedding_scale (gemma3).
// Row by row from the token and its position alone: batch-invariant.
#pragma once

#include <cstdint>
#include <span>

#include "model/config.h"
#include "model/forward_segment.h"
#include "model/model_access.h"
#include "model/weights.h"

namespace kvstash {

// x (rows × n_embd) = each segment token's embedding row (+ its position embedding) × embedding_scale,
// rows concatenated in segment order; tmp: n_embd floats of scratch.
void embed_rows(const ModelImpl& model, std::span<const ForwardSegment> segments, float* x, float* tmp);

// x (n_embd floats) += position_embd row `pos`, decoded into tmp (n_embd floats). Throws
// Error(out_of_range) when the model has no row for pos (pos >= n_ctx_train): learned positions end at
// the table (check_positions, model/config.h).
void add_position_embedding(const ModelConfig& c, const ModelWeights& w, int64_t pos, float* x, float* tmp);

}  // namespace kvstash
