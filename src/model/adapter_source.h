// A LoRA adapter as read from one file, before it is bound to a model: the plug-in point for LoRA
// formats. read_gguf_lora reads llama.cpp's GGUF LoRA; read_peft_lora reads PEFT's adapter directory
// (adapter_config.json + adapter_model.safetensors; HF module names mapped to the GGUF base names
// below) and returns the same thing, and AdapterSet::load binds and checks either one identically.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/adapter_weights.h"
#include "model/weights.h"

namespace kvstash {

namespace gguf {
class File;
}
struct ModelConfig;

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
    // What the pairs point into when the reader owns it (PEFT: the mapped safetensors file and the permuted
    // lora_B copies); null for GGUF, whose file the caller keeps.
    std::shared_ptr<const void> storage;
    // PEFT: the bytes that define the adapter (adapter_config.json, then the safetensors file), in order, for
    // the adapter-set fingerprint; they live in `storage`. Empty for GGUF (the caller hashes its file).
    std::vector<std::span<const uint8_t>> content;
};

// "blk.<N>.<part>.weight" (attn_q ... ffn_down) or "output.weight" -> (layer, target); false for anything else.
bool parse_lora_target(const std::string& gguf_name, int64_t& layer, LoraTarget& target);

// llama.cpp's GGUF LoRA: general.type "adapter", adapter.type "lora", general.architecture ==
// `architecture`, adapter.lora.alpha (f32, optional), tensors "<base name>.lora_a" / ".lora_b" in pairs.
// The pairs point into `file`, which must outlive them. Throws Error(bad_format) for a file that is not
// such an adapter or has an unpaired tensor, Error(invalid_argument) for another architecture,
// Error(unsupported) naming a tensor whose target kvstash does not apply (token_embd, fused attn_qkv, ...).
LoraSource read_gguf_lora(const gguf::File& file, const std::string& architecture);

// True when `path` names a PEFT LoRA: a directory holding adapter_config.json, or a .safetensors file with an
// adapter_config.json beside it.
bool is_peft_lora_path(const std::string& path);

// PEFT's LoRA (save_pretrained): adapter_config.json (peft_type "LORA", r, lora_alpha, target_modules; bias
// "none"; use_dora, use_rslora, rank_pattern / alpha_pattern refused) and adapter_model.safetensors (F32, F16 or
// BF16 tensors "base_model.model.<HF module>.lora_A.weight" r × n_in and ".lora_B.weight" n_out × r). Module
// names map to GGUF base names as the model converter maps them (hf_tensor_name.h); alpha = lora_alpha. For
// llama, lora_B's attn_q / attn_k rows are permuted as convert_lora_to_gguf.py permutes them, so the result is
// the converted GGUF LoRA's weights exactly. Errors as read_gguf_lora's, plus Error(io) for unreadable files and
// Error(unsupported) for a refused option or a tensor kvstash does not apply (lora_embedding_*, modules_to_save).
LoraSource read_peft_lora(const std::string& path, const ModelConfig& config);

}  // namespace kvstash
