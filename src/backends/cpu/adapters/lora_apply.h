// The CPU's LoRA op (Backend::lora): each range's pairs for one model matrix added to that matrix's
// output rows (model/adapter_rows.h has which rows run under which set).
// Batch invariance: A x_t and B (A x_t) are `matmul`s, whose row t is a fixed function of x_t alone; the
// scale and the add are elementwise. So a row's result does not depend on the other rows or segments.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/adapter_rows.h"

namespace kvstash {

class ThreadPool;

// Scratch for the LoRA intermediates; owned by the CPU backend.
struct LoraScratch {
    std::vector<float> ax;   // (rows, rank)
    std::vector<float> bax;  // (rows, n_out)
};

// y (rows × n_out) += each range's LoRA pairs for (layer, target) applied to x (rows × n_in).
// layer = n_layer for the output projection.
void apply_lora(std::span<const AdapterRows> ranges, int64_t layer, LoraTarget target, const float* x, float* y,
                LoraScratch& scratch, ThreadPool& pool);

// The hook the feed-forward block calls after each projection (backends/cpu/ffn/feed_forward.h); inactive
// when `ranges` is empty.
struct LoraHook {
    std::span<const AdapterRows> ranges;
    int64_t layer = 0;
    LoraScratch* scratch = nullptr;
    void operator()(LoraTarget target, const float* x, float* y, ThreadPool& pool) const {
        if (!ranges.empty()) apply_lora(ranges, layer, target, x, y, *scratch, pool);
    }
};

}  // namespace kvstash
