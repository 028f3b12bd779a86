// What a loaded AdapterSet holds (AdapterSet::Impl) and AdapterAccess, the one internal way into it:
// LoRA matrix pairs bound to the mapped adapter files, grouped by the model matrix they modify, and the
// control vectors summed per layer. src/ only: never include from include/kvstash/.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "kvstash/adapter.h"
#include "model/weights.h"

namespace kvstash {

// The model matrices a LoRA may modify (output: the logits projection).
enum class LoraTarget : uint8_t { q, k, v, o, gate, up, down, output };
inline constexpr size_t kLoraTargets = 8;

// One LoRA pair for one model matrix W (n_out × n_in): y += scale · B (A x).
struct LoraPair {
    MatrixRef a;         // rank × n_in   (GGUF "<W>.lora_a", dims {n_in, rank})
    MatrixRef b;         // n_out × rank  (GGUF "<W>.lora_b", dims {rank, n_out})
    float scale = 1.0f;  // the file's scale × alpha / rank (AdapterFile::scale)
};

struct AdapterSet::Impl {
    const Model* model = nullptr;
    std::vector<AdapterFile> files;
    std::vector<std::unique_ptr<gguf::File>> mapped;   // the LoRA files, which the pairs point into
    std::vector<std::shared_ptr<const void>> sources;  // what non-GGUF LoRA pairs point into (LoraSource::storage)
    // lora[layer][target]: the pairs for that matrix in file order (applied one after another); layer
    // n_layer holds the output projection's.
    std::vector<std::array<std::vector<LoraPair>, kLoraTargets>> lora;
    bool has_lora = false;
    // control[layer]: (n_embd) floats added to the residual stream after that layer, the sum over files
    // of scale · direction in file order; empty for layers without one (or outside the range).
    std::vector<std::vector<float>> control;
    std::array<uint8_t, 16> fingerprint{};  // XXH3-128, canonical; meaningful when files is not empty
};

struct AdapterAccess {
    using Impl = AdapterSet::Impl;
    static const Impl& impl(const AdapterSet& set) { return *set.impl_; }
};

using AdapterImpl = AdapterAccess::Impl;

// The pairs to apply to `target` of `layer` (layer = n_layer for the output), or none.
inline const std::vector<LoraPair>* lora_pairs(const AdapterImpl* set, int64_t layer, LoraTarget target) {
    if (set == nullptr || !set->has_lora) return nullptr;
    const auto& pairs = set->lora[static_cast<size_t>(layer)][static_cast<size_t>(target)];
    return pairs.empty() ? nullptr : &pairs;
}

}  // namespace kvstash
