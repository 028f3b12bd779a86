// Adapters: LoRA files and control vectors that change a model's computation at run time, without
// changing the Model (immutable, shared). An AdapterSet is loaded once against a model and chosen per
// State (StateOptions::adapters), so one process can serve several adapter sets on one model.
//
//   kvstash::AdapterFile files[] = {{kvstash::AdapterKind::lora, "style.gguf", 0.8f}};
//   auto adapters = kvstash::AdapterSet::load(*model, files);
//   kvstash::State state(*model, {.adapters = adapters});
//   evaluator.eval(state, tokens);  // every projection the LoRA targets gets + scale · B (A x)
//
// Identity: a State made under an adapter set is bound to it (docs/adapters.md): its state file, its
// prefix-cache blocks and its sessions carry the fingerprint of the model *and* the set, and are refused
// (state files) or not matched (prefix cache) under another set. The empty set is the model alone.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvstash/model.h"

namespace kvstash {

enum class AdapterKind {
    lora,            // llama.cpp's GGUF LoRA (general.type "adapter", adapter.type "lora")
    control_vector,  // llama.cpp's --control-vector GGUF (direction.<layer> tensors)
};

struct AdapterFile {
    AdapterKind kind = AdapterKind::lora;
    std::string path;
    // LoRA: the effective scale is scale · adapter.lora.alpha / rank (scale alone when alpha is 0), as in
    // llama.cpp. Control vector: the vectors are multiplied by it (and summed over files, in order).
    float scale = 1.0f;
};

// Layers whose output the control vectors are added to, inclusive (llama.cpp's
// --control-vector-layer-range): first <= 0 means 1, last <= 0 means n_layer. Layer 0 never has one.
struct ControlVectorLayers {
    int64_t first = 0;
    int64_t last = 0;
};

class AdapterSet {
public:
    // Reads and checks every file against `model` (architecture, each target tensor present with
    // matching shape, a control vector's width). Throws Error(io) for an unreadable file,
    // Error(bad_format) for a malformed one or one whose kind is not `kind`, Error(invalid_argument)
    // naming the tensor for an adapter made for another model, Error(unsupported) for a LoRA target
    // kvstash does not apply. The model must outlive the set. An empty list gives the empty set.
    static std::shared_ptr<const AdapterSet> load(const Model& model, std::span<const AdapterFile> files,
                                                  ControlVectorLayers layers = {});
    ~AdapterSet();
    AdapterSet(const AdapterSet&) = delete;
    AdapterSet& operator=(const AdapterSet&) = delete;

    bool empty() const;
    const std::vector<AdapterFile>& files() const;
    const Model& model() const;
    // 32 hex digits identifying the set: each file's content hash, kind and scale, in order, and the
    // control-vector layer range; "" for the empty set.
    std::string fingerprint() const;
    // "lora style.gguf ×0.8, control-vector happy.gguf ×1" (for messages); "no adapters" when empty.
    std::string describe() const;

private:
    AdapterSet();
    struct Impl;
    friend struct AdapterAccess;  // src/model/adapter_weights.h
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash
