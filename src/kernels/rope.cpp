#include "kernels/rope.h"

#include <cmath>

namespace kvstash {

RopeTable::RopeTable(const ModelConfig& config, std::vector<float> freq_factors)
    : n_rot_(config.n_rot), head_dim_(config.head_dim), position_scale_(1.0f / config.rope_linear_factor),
      layout_(config.rope_layout) {
    const int64_t half = n_rot_ / 2;
    inv_freq_.resize(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        // float32 like the reference implementations: base ** (2i / n_rot), then its inverse.
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(n_rot_);
        float inv = 1.0f / std::pow(config.rope_freq_base, exponent);
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
    const int64_t half = n_rot_ / 2;
    for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + h * head_dim_;
        for (int64_t i = 0; i < half; ++i) {
            // normal: pairs (2i, 2i+1); neox: pairs (i, i + half)
            const int64_t a = layout_ == RopeLayout::normal ? 2 * i : i;
            const int64_t b = layout_ == RopeLayout::normal ? 2 * i + 1 : i + half;
            const float x0 = v[a];
            const float x1 = v[b];
            v[a] = x0 * cos_v[i] - x1 * sin_v[i];
            v[b] = x0 * sin_v[i] + x1 * cos_v[i];
        }
    }
}

}  // namespace kvstash
