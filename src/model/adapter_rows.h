// Which rows of a micro-batch run under which adapters: each segment may carry its own AdapterSet (or
// none), so requests under different adapters are batched together without changing anyone's result.
// The forward pass plans the ranges (model/forward.cpp); a backend applies them (Backend::lora, ::control;
// on the CPU: backends/cpu/adapters/).
//   LoRA:           y_t += scale · B (A x_t)  for every row t of a segment whose set modifies that matrix,
//                   after W x_t and before the bias (as llama.cpp), pairs in file order.
//   control vector: x_t += v_layer  after the layer (its residual adds), as llama.cpp's --control-vector.
#pragma once

#include <cstdint>
#include <span>

#include "model/adapter_weights.h"

namespace kvstash {

// Rows [first_row, first_row + n_rows) of a micro-batch's activations, under `set` (null: none).
struct AdapterRows {
    int64_t first_row = 0;
    int64_t n_rows = 0;
    const AdapterImpl* set = nullptr;
};

// True when some range's set has a LoRA pair / a control vector.
bool any_lora(std::span<const AdapterRows> ranges);
bool any_control(std::span<const AdapterRows> ranges);

}  // namespace kvstash
