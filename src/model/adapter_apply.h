// Adapters in the forward pass: each segment of a micro-batch may carry its own AdapterSet (or none),
// so requests under different adapters are batched together without changing anyone's result.
//   LoRA:           y_t += scale · B (A x_t)  for every row t of a segment whose set modifies that matrix,
//                   after W x_t and before the bias (as llama.cpp), pairs in file order.
//   control vector: x_t += v_layer  after the layer (its residual adds), as llama.cpp's --control-vector.
// Batch invariance: A x_t and B (A x_t) are `matmul`s, whose row t is a fixed function of x_t alone; the
// scale and the add are elementwise. So a row's result does not depend on the other rows or segments.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/adapter_weights.h"

namespace kvstash {

class ThreadPool;

// Rows [first_row, first_row + n_rows) of a micro-batch's activations, under `set` (null: none).
struct AdapterRows {
    int64_t first_row = 0;
    int64_t n_rows = 0;
    const AdapterImpl* set = nullptr;
};

// Scratch for the LoRA intermediates; owned by the forward scratch of one evaluator.
struct LoraScratch {
    std::vector<float> ax;   // (rows, rank)
    std::vector<float> bax;  // (rows, n_out)
};

// True when some range's set has a LoRA pair for (layer, target) / a control vector.
bool any_lora(std::span<const AdapterRows> ranges);
bool any_control(std::span<const AdapterRows> ranges);

// y (rows × n_out) += each range's LoRA pairs for (layer, target) applied to x (rows × n_in).
// layer = n_layer for the output projection.
void apply_lora(std::span<const AdapterRows> ranges, int64_t layer, LoraTarget target, const float* x, float* y,
                LoraScratch& scratch, ThreadPool& pool);

// x (rows × n_embd) += each range's control vector for `layer`.
void apply_control(std::span<const AdapterRows> ranges, int64_t layer, float* x, int64_t n_embd);

// The hook the feed-forward block calls after each projection (model/block_ops.h); inactive when
// `ranges` is empty.
struct LoraHook {
    std::span<const AdapterRows> ranges;
    int64_t layer = 0;
    LoraScratch* scratch = nullptr;
    void operator()(LoraTarget target, const float* x, float* y, ThreadPool& pool) const {
        if (!ranges.empty()) apply_lora(ranges, layer, target, x, y, *scratch, pool);
    }
};

}  // namespace kvstash
