#include "model/hf_rope_scaling.h"

#include <cmath>

#include "kvstash/error.h"

namespace kvstash {

// The converter's arithmetic, operation by operation (torch float32; a Python number meeting a float32 tensor is
// rounded to float32 first; `number / tensor` is torch's __rtruediv__, tensor.reciprocal() * number):
//   freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
//   wavelen = 2 * math.pi / freq
//   wavelen < high_freq_wavelen -> 1; wavelen > low_freq_wavelen -> factor; else
//   smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
//   1 / ((1 - smooth) / factor + smooth)
// This file is compiled without FMA contraction (plain C++ flags), so each line rounds as torch's does.
std::vector<float> llama3_rope_freq_factors(const Llama3RopeScaling& s) {
    if (s.dim <= 0 || s.dim % 2 != 0)
        throw Error(ErrorCode::bad_format, "llama3 rope scaling needs an even head dimension");
    if (!(s.rope_theta > 0.0) || !(s.factor > 0.0) || !(s.original_max_position_embeddings > 0.0) ||
        !(s.low_freq_factor > 0.0) || !(s.high_freq_factor > 0.0)) {
        throw Error(ErrorCode::bad_format, "llama3 rope scaling parameters must be positive");
    }
    const float base = static_cast<float>(s.rope_theta);
    const float dim = static_cast<float>(s.dim);
    // Python floats (double) first, then rounded to float32 where they meet a tensor.
    const double low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
    const double high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
    const float low_wavelen_f = static_cast<float>(low_freq_wavelen);
    const float high_wavelen_f = static_cast<float>(high_freq_wavelen);
    const float two_pi = static_cast<float>(2 * M_PI);
    const float old_context_len = static_cast<float>(s.original_max_position_embeddings);
    const float low_freq_factor = static_cast<float>(s.low_freq_factor);
    const float band = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
    const float factor = static_cast<float>(s.factor);

    std::vector<float> out;
    out.reserve(static_cast<size_t>(s.dim / 2));
    for (int64_t i = 0; i < s.dim; i += 2) {
        const float exponent = static_cast<float>(i) / dim;
        const float power = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
        const float freq = (1.0f / power) * 1.0f;
        const float wavelen = (1.0f / freq) * two_pi;
        if (wavelen < high_wavelen_f) {
            out.push_back(1.0f);
        } else if (wavelen > low_wavelen_f) {
            out.push_back(factor);
        } else {
            const float smooth = ((1.0f / wavelen) * old_context_len - low_freq_factor) / band;
            const float blended = (1.0f - smooth) / factor + smooth;
            out.push_back((1.0f / blended) * 1.0f);
        }
    }
    return out;
}

}  // namespace kvstash
