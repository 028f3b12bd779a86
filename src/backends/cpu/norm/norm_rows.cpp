#include "backends/cpu/norm/norm_rows.h"

#include "backends/cpu/norm/layer_norm.h"
#include "backends/cpu/norm/norm.h"

namespace kvstash {

void norm_rows(const ModelConfig& c, const float* x, const std::vector<float>& weight, const std::vector<float>& bias,
               float* out, int64_t n_rows) {
    const int64_t n = c.n_embd;
    if (c.norm == NormKind::layer) {
        const float* b = bias.empty() ? nullptr : bias.data();
        for (int64_t t = 0; t < n_rows; ++t) layer_norm_row(x + t * n, weight.data(), b, out + t * n, n, c.norm_eps);
    } else {
        for (int64_t t = 0; t < n_rows; ++t) rms_norm_row(x + t * n, weight.data(), out + t * n, n, c.norm_eps);
    }
}

void head_norm_rows(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_vectors) {
    const auto width = static_cast<int64_t>(weight.size());
    // rms_norm_row takes the scale from the whole row before writing: in place is fine.
    for (int64_t v = 0; v < n_vectors; ++v)
        rms_norm_row(x + v * width, weight.data(), x + v * width, width, c.norm_eps);
}

void post_norm_rows(const ModelConfig& c, const std::vector<float>& weight, float* x, int64_t n_rows) {
    if (weight.empty()) return;
    norm_rows(c, x, weight, {}, x, n_rows);
}

}  // namespace kvstash
