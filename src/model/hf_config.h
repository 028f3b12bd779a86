// A Hugging Face config.json read as llama.cpp's converter (convert_hf_to_gguf.py) reads it: the GGUF
// hyper-parameter keys it would write (`general.architecture`, `<arch>.*`, with its value types), and the tensor
// transforms it would apply. Architectures: LlamaForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel, Gemma3ForCausalLM,
// MambaForCausalLM, Mamba2ForCausalLM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "format/gguf_values.h"

namespace kvstash {

struct HfModelSpec {
    std::string hf_architecture;  // "LlamaForCausalLM", ...
    std::string architecture;     // the GGUF one: "llama", "qwen2", "gpt2", "gemma3"
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    // llama: Q/K rows (and biases) permuted from HF's rotate-half layout to GGUF's interleaved pairs.
    bool permute_qk = false;
    // gpt2: Conv1D weights are stored (in, out); GGUF wants (out, in) rows.
    bool transpose_conv1d = false;
    // gemma3: RMSNorm weights w are used as 1 + w; the converter stores 1 + w.
    bool norm_plus_one = false;
    // mamba2: the gated norm's groups (its weight [d_inner] is stored [n_group, d_inner / n_group]).
    int64_t ssm_group_count = 0;
    // llama with rope_type llama3: the rope_freqs.weight tensor the converter adds (n_rot / 2 floats), else empty.
    std::vector<float> rope_freq_factors;
    gguf::Metadata metadata;  // general.architecture and the <arch>.* keys
};

// Throws Error(unsupported) naming an architecture kvstash cannot read from a directory, Error(bad_format)
// naming a missing or mistyped key.
HfModelSpec read_hf_config(const nlohmann::json& config, const std::string& display_path);

}  // namespace kvstash
