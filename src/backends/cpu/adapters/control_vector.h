// The CPU's control-vector op (Backend::control): each range's vector for a layer added to its rows of
// the residual stream after that layer (model/adapter_rows.h). Elementwise: batch-invariant.
#pragma once

#include <cstdint>
#include <span>

#include "model/adapter_rows.h"

namespace kvstash {

// x (rows × n_embd) += each range's control vector for `layer`.
void apply_control(std::span<const AdapterRows> ranges, int64_t layer, float* x, int64_t n_embd);

}  // namespace kvstash
