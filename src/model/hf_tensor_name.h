// Hugging Face tensor names -> the GGUF names llama.cpp's converter gives them (gguf-py's tensor_mapping.py),
// for the architectures model/hf_config.h reads.
#pragma once

#include <optional>
#include <string>

#include "model/hf_config.h"

namespace kvstash {

// nullopt for tensors the converter drops (rotary_emb.inv_freq, GPT-2's attn.bias / attn.masked_bias buffers);
// throws Error(unsupported) naming a tensor kvstash does not know, rather than silently ignoring weights.
std::optional<std::string> gguf_tensor_name(const HfModelSpec& spec, const std::string& hf_name);

}  // namespace kvstash
