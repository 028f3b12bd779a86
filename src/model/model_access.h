// What a loaded Model holds: the mapped file, its hyper-parameters, bound weights and tokenizer.
#pragma once

#include <memory>
#include <string>

#include "format/gguf.h"
#include "kernels/rope.h"
#include "kvstash/model.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvstash {

struct Model::Impl {
    std::unique_ptr<gguf::File> file;
    ModelConfig config;
    ModelWeights weights;
    RopeTable rope;
    std::unique_ptr<Tokenizer> tokenizer;  // null when the vocabulary is not supported
    std::string tokenizer_error;           // why, when null
};

}  // namespace kvstash
