#include "server/preset.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kvstash/error.h"

using nlohmann::json;

namespace kvstash::server {
namespace {

enum class Kind { number, integer, count, stop };

struct OptionField {
    const char* name;
    Kind kind;
    const char* ollama_name;  // the name in Ollama's "options"
};

constexpr OptionField kOptions[] = {
    {"temperature", Kind::number, "temperature"},
    {"top_k", Kind::integer, "top_k"},
    {"top_p", Kind::number, "top_p"},
    {"min_p", Kind::number, "min_p"},
    {"repeat_penalty", Kind::number, "repeat_penalty"},
    {"seed", Kind::integer, "seed"},
    {"max_tokens", Kind::count, "num_predict"},
    {"stop", Kind::stop, "stop"},
};

[[noreturn]] void bad(const std::string& origin, const std::string& field, const std::string& why) {
    throw Error(ErrorCode::bad_format, "preset " + origin + ": field '" + field + "' " + why);
}

void check_option(const std::string& origin, const OptionField& f, const json& v) {
    const std::string field = std::string("options.") + f.name;
    switch (f.kind) {
        case Kind::number: {
            // top_p and min_p are probabilities; temperature and repeat_penalty only need to be >= 0.
            const bool probability = std::string(f.name) == "top_p" || std::string(f.name) == "min_p";
            if (!v.is_number() || v.get<double>() < 0 || (probability && v.get<double>() > 1))
                bad(origin, field, probability ? "must be a number from 0 to 1" : "must be a number >= 0");
            return;
        }
        case Kind::integer:
            if (!v.is_number_integer()) bad(origin, field, "must be an integer");
            return;
        case Kind::count:
            if (!v.is_number_integer() || v.get<int64_t>() < 1) bad(origin, field, "must be an integer >= 1");
            return;
        case Kind::stop:
            if (v.is_string()) return;
            if (v.is_array()) {
                for (const json& s : v) {
                    if (!s.is_string()) bad(origin, field, "must be a string or a list of strings");
                }
                return;
            }
            bad(origin, field, "must be a string or a list of strings");
    }
}

// "adapters": a list of {"lora": FILE, "scale": S} / {"control_vector": FILE, "scale": S} (scale 1 when not
// given), or a FILE alone for a LoRA at scale 1.
std::vector<AdapterFile> parse_adapters(const std::string& origin, const json& list) {
    if (!list.is_array()) bad(origin, "adapters", "must be a list of adapters");
    std::vector<AdapterFile> out;
    for (size_t i = 0; i < list.size(); ++i) {
        const json& item = list[i];
        const std::string field = "adapters[" + std::to_string(i) + "]";
        AdapterFile file;
        if (item.is_string()) {
            file.path = item.get<std::string>();
        } else if (item.is_object()) {
            int kinds = 0;
            for (const auto& [key, value] : item.items()) {
                if (key == "lora" || key == "control_vector") {
                    if (!value.is_string() || value.get<std::string>().empty())
                        bad(origin, field + "." + key, "must be the adapter file's path");
                    file.kind = key == "lora" ? AdapterKind::lora : AdapterKind::control_vector;
                    file.path = value.get<std::string>();
                    ++kinds;
                } else if (key == "scale") {
                    if (!value.is_number()) bad(origin, field + ".scale", "must be a number");
                    file.scale = value.get<float>();
                } else {
                    bad(origin, field + "." + key, "is not an adapter field (lora or control_vector, scale)");
                }
            }
            if (kinds != 1) bad(origin, field, "must name one file: {\"lora\": FILE} or {\"control_vector\": FILE}");
        } else {
            bad(origin, field, "must be a file name or {\"lora\": FILE, \"scale\": S}");
        }
        if (file.path.empty()) bad(origin, field, "must name the adapter file");
        out.push_back(std::move(file));
    }
    return out;
}

bool has_system_message(const json& messages) {
    for (const json& m : messages) {
        if (m.is_object() && m.value("role", "") == "system") return true;
    }
    return false;
}

}  // namespace

std::string preset_name_of(const std::string& path) {
    std::string name = std::filesystem::path(path).filename().string();
    for (const char* suffix : {".preset.json", ".json"}) {
        if (name.ends_with(suffix)) return name.substr(0, name.size() - std::string(suffix).size());
    }
    return name;
}

Preset parse_preset(const json& doc, const std::string& name, const std::string& origin) {
    if (!doc.is_object()) throw Error(ErrorCode::bad_format, "preset " + origin + ": must be a JSON object");
    Preset p;
    p.name = name;
    for (const auto& [key, value] : doc.items()) {
        if (key == "model" || key == "system" || key == "template") {
            if (!value.is_string()) bad(origin, key, "must be a string");
        } else if (key == "options") {
            if (!value.is_object()) bad(origin, key, "must be an object of sampling defaults");
        } else if (key == "adapters") {
            p.adapters = parse_adapters(origin, value);
        } else {
            bad(origin, key, "is not a preset field (model, system, template, options, adapters)");
        }
    }
    if (!doc.contains("model") || doc["model"].get<std::string>().empty()) {
        bad(origin, "model", "is required: the name of a served model (or a model file)");
    }
    p.model = doc["model"].get<std::string>();
    p.system = doc.value("system", "");
    p.chat_template = doc.value("template", "");
    if (doc.contains("options")) {
        for (const auto& [key, value] : doc["options"].items()) {
            const OptionField* known = nullptr;
            for (const OptionField& f : kOptions) {
                if (key == f.name) known = &f;
            }
            if (!known) {
                bad(origin, "options." + key,
                    "is not a preset option (temperature, top_k, top_p, min_p, repeat_penalty, seed, max_tokens, "
                    "stop)");
            }
            check_option(origin, *known, value);
            p.options[key] = value;
        }
    }
    return p;
}

Preset load_preset_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(ErrorCode::io, "preset '" + path + "' cannot be read");
    std::stringstream text;
    text << in.rdbuf();
    json doc;
    try {
        doc = json::parse(text.str());
    } catch (const json::exception& e) {
        throw Error(ErrorCode::bad_format, "preset '" + path + "' is not valid JSON: " + e.what());
    }
    Preset preset = parse_preset(doc, preset_name_of(path), "'" + path + "'");
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    for (size_t i = 0; i < preset.adapters.size(); ++i) {
        AdapterFile& file = preset.adapters[i];
        if (std::filesystem::path(file.path).is_relative()) file.path = (dir / file.path).string();
        std::error_code ec;
        if (!std::filesystem::is_regular_file(file.path, ec)) {
            throw Error(ErrorCode::io, "preset '" + path + "': field 'adapters[" + std::to_string(i) + "]' names '" +
                                           file.path + "', which is not a readable file");
        }
    }
    return preset;
}

json apply_preset(const Preset& preset, json body, const std::string& path) {
    if (!body.is_object()) return body;
    const bool ollama = path.starts_with("/api/");
    if (ollama) {
        if (!body.contains("options") || body["options"].is_null()) body["options"] = json::object();
        json& options = body["options"];
        if (!options.is_object()) return body;  // the route answers 400 for it
        for (const OptionField& f : kOptions) {
            if (preset.options.contains(f.name) && !options.contains(f.ollama_name))
                options[f.ollama_name] = preset.options[f.name];
        }
    } else {
        for (const OptionField& f : kOptions) {
            if (!preset.options.contains(f.name) || body.contains(f.name)) continue;
            if (f.kind == Kind::count && (body.contains("max_completion_tokens") || body.contains("n_predict")))
                continue;
            body[f.name] = preset.options[f.name];
        }
    }
    if (preset.system.empty()) return body;
    if (body.contains("messages") && body["messages"].is_array()) {
        if (!has_system_message(body["messages"])) {
            body["messages"].insert(body["messages"].begin(), json{{"role", "system"}, {"content", preset.system}});
        }
    } else if (path == "/api/generate" && !body.contains("system")) {
        body["system"] = preset.system;
    }
    return body;
}

}  // namespace kvstash::server
