// Presets (what a Modelfile gives Ollama users): a name that binds a served model, a system prompt, sampling
// defaults, a chat template and adapters. A preset file is JSON, NAME.preset.json in --models DIR or
// `serve --preset FILE`:
//   {"model": "smollm2", "system": "You are terse.", "template": "chatml",
//    "adapters": [{"lora": "style.gguf", "scale": 0.8}, {"control_vector": "calm.gguf"}, "other-lora.gguf"],
//    "options": {"temperature": 0, "top_k": 40, "top_p": 0.9, "min_p": 0, "repeat_penalty": 1.1,
//                "seed": 7, "max_tokens": 64, "stop": ["\n\n"]}}
// A request naming the preset runs on its model with these defaults (the request's own fields win), under its
// adapters, and with the system prompt first when its messages have none. The model's load prefills the system
// prompt once (under the adapters), so the first request on the preset already reuses it from the prefix cache.
// An adapter's relative path is taken from the preset file's directory, as a Modelfile's ADAPTER is.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvstash/adapter.h"

namespace kvstash::server {

struct Preset {
    std::string name;           // from the file: NAME.preset.json
    std::string model;          // a served model's name, or what -m takes (a GGUF, a directory, hf:...)
    std::string system;         // empty: none
    std::string chat_template;  // "template": as --chat-template takes (empty: the model's own)
    nlohmann::json options = nlohmann::json::object();  // validated sampling defaults (keys as above)
    // LoRAs and control vectors, applied in this order (empty: the model alone). A preset with adapters is
    // another computation than its model: its prefix cache and named states are its own (docs/models.md).
    std::vector<AdapterFile> adapters;
};

// Reads a preset file. Error(bad_format) naming the file and the field for anything wrong in it,
// Error(io) when it (or an adapter file it names) cannot be read. Adapter paths come back resolved against the
// file's directory.
Preset load_preset_file(const std::string& path);
// The preset of a parsed JSON document (`origin` names it in errors).
Preset parse_preset(const nlohmann::json& doc, const std::string& name, const std::string& origin);
// The name a preset file gives (FILE.preset.json -> FILE; other.json -> other).
std::string preset_name_of(const std::string& path);

// A request body with the preset applied for the route `path` (OpenAI /v1/..., Ollama /api/...): each default
// the body does not set, and the system prompt before the messages when none of them is a system message.
nlohmann::json apply_preset(const Preset& preset, nlohmann::json body, const std::string& path);

}  // namespace kvstash::server
