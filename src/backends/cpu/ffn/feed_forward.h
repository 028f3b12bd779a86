// The CPU's feed-forward op (Backend::feed_forward): the layer's FFN kind (SwiGLU, GeGLU or GELU: data of
// the config, not code of a family) with its optional biases and the rows' LoRA terms, on the matmul and
// activation kernels. Row by row (or elementwise), so batch-invariant.
#pragma once

#include <cstdint>

#include "backends/cpu/adapters/lora_apply.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvstash {

class ThreadPool;

// Scratch of the feed-forward block: gate and up, (n_tokens × n_ff) each.
struct FfnScratch {
    float* gate = nullptr;
    float* up = nullptr;
};

// out (n_tokens × n_embd) = the layer's feed-forward block of the normalised rows xn, with its biases;
// `lora` adds the rows' LoRA terms after each projection (before its bias).
void feed_forward(const ModelConfig& c, const LayerWeights& l, const float* xn, int64_t n_tokens, FfnScratch s,
                  float* out, ThreadPool& pool, const LoraHook& lora = {});

}  // namespace kvstash
