// A LoRA adapter as read from one file, before it is bound to a model: the plug-in point for LoRA
// formats. read_gguf_lora reads llama.cpp's GGUF LoRA; a reader of PEFT's adapter_model.safetensors +
// adapter_config.json (r, lora_alpha, target_modules; HF module names mapped to the GGUF base names
// below) returns the same thing, and AdapterSet::load binds and checks either one identically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/adapter_weights.h"
#include "model/weights.h"

namespace kvstash {

namespace gguf {
class File;
}

struct LoraSourcePair {
    std::string base_name;  // the model tensor it modifies, GGUF name: "blk.3.attn_q.weight", "output.weight"
    int64_t layer = -1;     // -1 for the output
    LoraTarget target = LoraTarget::q;
    MatrixRef a;  // rank × n_in
    MatrixRef b;  // n_out × rank
};

struct LoraSource {
    std::string path;
    float alpha = 0.0f;  // adapter.lora.alpha; 0 = none (the scale is then the user's alone)
    std::vector<LoraSourcePair> pairs;
};

// llama.cpp's GGUF LoRA: general.type "adapter", adapter.type "lora", general.architecture ==
// `architecture`, adapter.lora.alpha (f32, optional), tensors "<base name>.lora_a" / ".lora_b" in pairs.
// The pairs point into `file`, which must outlive them. Throws Error(bad_format) for a file that is not
// such an adapter or has an unpaired tensor, Error(invalid_argument) for another architecture,
// Error(unsupported) naming a tensor whose target kvstash does not apply (token_embd, fused attn_qkv, ...).
LoraSource read_gguf_lora(const gguf::File& file, const std::string& architecture);

}  // namespace kvstash
