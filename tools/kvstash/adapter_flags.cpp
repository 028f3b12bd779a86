#include "kvstash/adapter_flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "kvstash/error.h"

namespace kvstash::cli {

void add_adapter_flags(CLI::App& cmd, AdapterFlags& flags) {
    cmd.add_option("--lora", flags.lora,
                   "LoRA adapter, FILE or FILE:SCALE (default 1; the effective scale is SCALE * alpha / rank): "
                   "llama.cpp's GGUF LoRA, or a PEFT adapter directory (adapter_config.json + "
                   "adapter_model.safetensors) or its .safetensors file; repeatable")
        ->allow_extra_args(false);
    cmd.add_option("--control-vector", flags.control_vector,
                   "control vector in llama.cpp's GGUF format (direction.<layer> tensors added to the residual "
                   "stream after each layer), FILE or FILE:SCALE; repeatable (summed)")
        ->allow_extra_args(false);
    cmd.add_option("--control-vector-layer-range", flags.control_vector_layers,
                   "apply control vectors to layers FIRST..LAST only (inclusive; default 1..n_layer)")
        ->expected(2);
}

AdapterFile parse_adapter_spec(const std::string& spec, AdapterKind kind) {
    AdapterFile f;
    f.kind = kind;
    f.path = spec;
    if (const size_t colon = spec.rfind(':'); colon != std::string::npos && colon + 1 < spec.size()) {
        const std::string tail = spec.substr(colon + 1);
        char* end = nullptr;
        errno = 0;
        const float scale = std::strtof(tail.c_str(), &end);
        if (end == tail.c_str() + tail.size() && errno == 0 && std::isfinite(scale)) {
            f.path = spec.substr(0, colon);
            f.scale = scale;
        }
    }
    if (f.path.empty()) throw Error(ErrorCode::invalid_argument, "adapter '" + spec + "' names no file");
    return f;
}

std::shared_ptr<const AdapterSet> load_adapter_flags(const Model& model, const AdapterFlags& flags) {
    std::vector<AdapterFile> files;
    for (const std::string& s : flags.lora) files.push_back(parse_adapter_spec(s, AdapterKind::lora));
    for (const std::string& s : flags.control_vector)
        files.push_back(parse_adapter_spec(s, AdapterKind::control_vector));
    if (files.empty()) {
        if (!flags.control_vector_layers.empty())
            throw Error(ErrorCode::invalid_argument, "--control-vector-layer-range needs --control-vector");
        return nullptr;
    }
    ControlVectorLayers layers;
    if (flags.control_vector_layers.size() == 2) {
        layers.first = flags.control_vector_layers[0];
        layers.last = flags.control_vector_layers[1];
    }
    return AdapterSet::load(model, files, layers);
}

}  // namespace kvstash::cli
