// RoPE angles and the rotation of a token's heads (backends/cpu/rope/rope.h).
#include "backends/cpu/rope/rope.h"

#include <cmath>

#include "backends/cpu/rope/rope_rotate.h"

namespace kvstash {

RopeTable::RopeTable(const RopeParams& params, int64_t head_dim, std::vector<float> freq_factors)
    : n_rot_(params.n_rot), head_dim_(head_dim), position_scale_(1.0f / params.linear_factor), layout_(params.layout) {
    const int64_t half = n_rot_ / 2;
    inv_freq_.resize(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        // float32 like the reference implementations: base ** (2i / n_rot), then its inverse.
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(n_rot_);
        float inv = 1.0f / std::pow(params.freq_base, exponent);
        if (!freq_factors.empty()) inv /= freq_factors[static_cast<size_t>(i)];
        inv_freq_[static_cast<size_t>(i)] = inv;
    }
}

void RopeTable::angles(int64_t pos, float* cos_out, float* sin_out) const {
    const float p = static_cast<float>(pos) * position_scale_;
    for (size_t i = 0; i < inv_freq_.size(); ++i) {
        const double angle = static_cast<double>(p * inv_freq_[i]);
        cos_out[i] = static_cast<float>(std::cos(angle));
        sin_out[i] = static_cast<float>(std::sin(angle));
    }
}

void RopeTable::apply(float* x, int64_t n_heads, const float* cos_v, const float* sin_v) const {
    apply_with(active_isa(), x, n_heads, cos_v, sin_v);
}

void RopeTable::apply_with(Isa isa, float* x, int64_t n_heads, const float* cos_v, const float* sin_v) const {
    const kernels::RopeRotateFn rotate = kernels::kernel_table(isa).rope_rotate;
    for (int64_t h = 0; h < n_heads; ++h) rotate(layout_, x + h * head_dim_, n_rot_ / 2, 0, cos_v, sin_v);
}

}  // namespace kvstash
