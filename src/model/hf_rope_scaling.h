// Llama 3.1 "llama3" rope scaling of a Hugging Face directory, as llama.cpp's converter writes it: the
// `rope_freqs.weight` tensor (n_rot / 2 float32 divisors of the rotation frequencies) that
// convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors computes in torch float32. Computed here with the
// same float32 operations in the same order, so a directory and the GGUF converted from it have the same bytes
// (and the same model fingerprint).
#pragma once

#include <cstdint>
#include <vector>

namespace kvstash {

struct Llama3RopeScaling {
    double rope_theta = 10000.0;
    int64_t dim = 0;  // head_dim, else hidden_size / num_attention_heads
    double factor = 8.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    double original_max_position_embeddings = 8192.0;
};

// (dim / 2) factors: 1 for short wavelengths, `factor` for long ones, a smooth blend between.
//
// freq_i = 1 / theta^(2i / dim) is torch's vectorized float32 pow (SLEEF, within 1 ulp); here it is the correctly
// rounded float32 of the double power. The two agree for Llama 3.x's shapes (theta 500000, dim 64 and 128; checked
// against the converter's own function by tests/fixtures/hf/llama3_rope_factors.json); for another theta / dim a
// factor in the smooth band could differ in its last bit (the logits by float rounding; the fingerprint then
// differs from the converted GGUF's).
std::vector<float> llama3_rope_freq_factors(const Llama3RopeScaling& s);

}  // namespace kvstash
