// The parameters of rotary position embedding (backends/cpu/rope/rope.h), as a model's metadata gives them. The
// kernels own them; a model's configuration holds one (model/config.h).
#pragma once

#include <cstdint>

namespace kvstash {

enum class RopeLayout {
    normal,  // GGUF "normal" (llama): rotate adjacent pairs (x[2i], x[2i+1])
    neox,    // NEOX: rotate (x[i], x[i + n_rot/2])
};

struct RopeParams {
    int64_t n_rot = 0;           // rotated dimensions of each head (even, at most head_dim)
    float freq_base = 10000.0f;  // theta: pair i turns at freq_base^(-2i / n_rot) radians per position
    // Linear position scaling (GGUF rope.scaling.type == "linear"): positions are divided by it.
    float linear_factor = 1.0f;
    // Per-pair frequency divisors are given (a Llama 3.1 rope_freqs tensor, "llama3" scaling); their values
    // are weights, passed to RopeTable with the parameters.
    bool has_freq_factors = false;
    RopeLayout layout = RopeLayout::normal;
};

}  // namespace kvstash
