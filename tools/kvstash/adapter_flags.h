// --lora FILE[:SCALE] and --control-vector FILE[:SCALE] (each repeatable, applied in the order given)
// and --control-vector-layer-range FIRST LAST, shared by generate, chat, prefill and perplexity; the
// AdapterSet they describe (docs/adapters.md). The server's named form (--lora NAME=FILE[:SCALE]) is in
// cmd_serve.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kvstash/adapter.h"
#include "kvstash/model.h"

namespace kvstash::cli {

struct AdapterFlags {
    std::vector<std::string> lora;
    std::vector<std::string> control_vector;
    std::vector<int64_t> control_vector_layers;  // empty or {first, last}
};

void add_adapter_flags(CLI::App& cmd, AdapterFlags& flags);

// "FILE" or "FILE:SCALE" (the scale a number after the last ':'), as an AdapterFile of `kind`.
// Throws Error(invalid_argument) for an empty path.
AdapterFile parse_adapter_spec(const std::string& spec, AdapterKind kind);

// The set the flags name, loaded against `model`; null when none is given.
std::shared_ptr<const AdapterSet> load_adapter_flags(const Model& model, const AdapterFlags& flags);

}  // namespace kvstash::cli
