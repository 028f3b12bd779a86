// Rotary position embedding. The angle of pair i at position p is
//   p / linear_factor * freq_base^(-2i / n_rot) / freq_factor[i]
// (RopeParams, backends/cpu/rope/rope_params.h; freq_factor from a Llama 3.1 rope_freqs tensor, else 1). Angles are a
// function of the absolute position only, so a token gets the same rotation whichever batch it is evaluated in.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/rope/rope_params.h"
#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {

class RopeTable {
public:
    RopeTable() = default;
    // Heads of head_dim floats, of which the first params.n_rot rotate. freq_factors: params.n_rot / 2
    // divisors, or empty.
    RopeTable(const RopeParams& params, int64_t head_dim, std::vector<float> freq_factors);

    // cos/sin of the n_rot/2 angles at `pos` into cos_out/sin_out.
    void angles(int64_t pos, float* cos_out, float* sin_out) const;
    // Rotates the first n_rot dims of each of n_heads vectors of head_dim floats in place, on the
    // process's instruction set; apply_with picks one (of available_isas(), not checked). Every ISA
    // gives the same bits (backends/cpu/rope/rope_rotate.h).
    void apply(float* x, int64_t n_heads, const float* cos_v, const float* sin_v) const;
    void apply_with(Isa isa, float* x, int64_t n_heads, const float* cos_v, const float* sin_v) const;

private:
    std::vector<float> inv_freq_;  // (n_rot/2)
    int64_t n_rot_ = 0;
    int64_t head_dim_ = 0;
    float position_scale_ = 1.0f;
    RopeLayout layout_ = RopeLayout::normal;
};

}  // namespace kvstash
