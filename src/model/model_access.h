// The one internal way into a Model: what a loaded Model holds (the mapped file, its hyper-parameters,
// bound weights and tokenizer) and ModelAccess, the accessor the forward pass, the evaluator, the
// fingerprint and chat-template detection use. src/ only: never include from include/kvstash/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/rope/rope.h"
#include "format/gguf.h"
#include "kvstash/model.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvstash {

struct Model::Impl {
    std::unique_ptr<gguf::File> file;
    ModelConfig config;
    ModelInfo info;  // the public part of config
    ModelWeights weights;
    RopeTable rope;
    RopeTable rope_swa;  // sliding-window layers' rope (config.rope_swa), when the model has such layers
    std::unique_ptr<Tokenizer> tokenizer;  // null when the vocabulary is not supported
    std::string tokenizer_error;           // why, when null
    std::vector<std::string> warnings;     // Model::warnings()
};

// Friend of Model (declared in kvstash/model.h): the only code that reaches Model::Impl.
struct ModelAccess {
    using Impl = Model::Impl;
    static const Impl& impl(const Model& model) { return *model.impl_; }
};

using ModelImpl = ModelAccess::Impl;

}  // namespace kvstash
