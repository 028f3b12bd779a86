// The 'session' section of a session file: JSON in, JSON out, everything checked before it is used.
#include "engine/session_file.h"

#include <nlohmann/json.hpp>

#include "base/json_depth.h"
#include "kvstash/error.h"
#include "kvstash/state_file.h"

namespace kvstash::session_file {
namespace {

using nlohmann::json;

[[noreturn]] void malformed(const std::string& path, const std::string& why) {
    throw Error(ErrorCode::bad_format, "state file '" + path + "': section 'session' " + why + ": the file is corrupt");
}

}  // namespace

std::string encode(const std::string& template_name, const std::vector<ChatMessage>& messages,
                   const std::vector<int64_t>& turn_starts) {
    json j;
    j["format"] = kFormatName;
    j["version"] = kVersion;
    j["template"] = template_name;
    j["messages"] = json::array();
    for (const ChatMessage& m : messages) j["messages"].push_back({{"role", m.role}, {"content", m.content}});
    j["turn_starts"] = turn_starts;
    // Invalid UTF-8 in a message (generated text cut inside a character) is replaced, not refused:
    // a save must not fail because of what the model wrote.
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Decoded decode(const std::string& text, const std::string& path, int64_t n_tokens) {
    if (json_depth::nesting_depth(text, json_depth::kMaxJsonDepth) > json_depth::kMaxJsonDepth)
        malformed(path, "nests deeper than " + std::to_string(json_depth::kMaxJsonDepth) + " levels");
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        malformed(path, std::string("is not valid JSON (") + e.what() + ")");
    }
    if (!j.is_object() || !j.contains("format") || j["format"] != kFormatName)
        malformed(path, "is not a kvstash session");
    if (!j.contains("version") || !j["version"].is_number_integer()) malformed(path, "has no integer 'version'");
    if (j["version"].get<int64_t>() > kVersion) {
        throw Error(ErrorCode::unsupported, "state file '" + path + "': its session is version " + j["version"].dump() +
                                                ", newer than this kvstash reads (" + std::to_string(kVersion) +
                                                "); load it with a newer kvstash");
    }
    if (j["version"].get<int64_t>() < 1) malformed(path, "has version " + j["version"].dump());
    if (!j.contains("template") || !j["template"].is_string()) malformed(path, "has no 'template' name");
    if (!j.contains("messages") || !j["messages"].is_array()) malformed(path, "has no 'messages' array");
    if (!j.contains("turn_starts") || !j["turn_starts"].is_array()) malformed(path, "has no 'turn_starts' array");

    Decoded d;
    d.template_name = j["template"].get<std::string>();
    for (const json& m : j["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string()) {
            malformed(path, "has a message that is not {\"role\": string, \"content\": string}");
        }
        d.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    // An optional system message, then user/assistant exchanges.
    const size_t first = !d.messages.empty() && d.messages[0].role == "system" ? 1 : 0;
    if ((d.messages.size() - first) % 2 != 0)
        malformed(path, "ends without the assistant's reply to the last user message");
    for (size_t i = first; i < d.messages.size(); ++i) {
        const char* expected = (i - first) % 2 == 0 ? "user" : "assistant";
        if (d.messages[i].role != expected) {
            malformed(path, "message " + std::to_string(i) + " has role '" + d.messages[i].role + "' where '" +
                                expected + "' belongs");
        }
    }
    for (const json& t : j["turn_starts"]) {
        if (!t.is_number_integer()) malformed(path, "has a turn start that is not an integer");
        const auto start = t.get<int64_t>();
        if (start < 0 || start > n_tokens || (!d.turn_starts.empty() && start < d.turn_starts.back())) {
            malformed(path, "has turn start " + std::to_string(start) + ", not in order within the state's " +
                                std::to_string(n_tokens) + " tokens");
        }
        d.turn_starts.push_back(start);
    }
    if (d.turn_starts.size() != (d.messages.size() - first) / 2) {
        malformed(path, "has " + std::to_string(d.turn_starts.size()) + " turn starts for " +
                            std::to_string((d.messages.size() - first) / 2) + " exchanges");
    }
    return d;
}

LoadedSession read(const Model& model, const ChatTemplate& chat_template, const std::string& path,
                   std::shared_ptr<const AdapterSet> adapters) {
    std::optional<std::string> section;
    State state = load_state(model, path, LoadOptions{std::move(adapters)}, &section);
    if (!section) {
        throw Error(ErrorCode::invalid_argument,
                    "'" + path +
                        "' is a state file without a chat session: it has no messages to resume; load a file "
                        "written by Session::save (or continue this one as a State, with load_state)");
    }
    Decoded d = decode(*section, path, state.n_tokens());
    if (d.template_name != chat_template.name()) {
        throw Error(ErrorCode::invalid_argument, "'" + path + "' holds a session in the '" + d.template_name +
                                                     "' chat template, but this chat uses '" + chat_template.name() +
                                                     "'; resume it with the '" + d.template_name + "' template");
    }
    LoadedSession loaded{std::move(state), std::move(d.messages), std::move(d.turn_starts), {}};
    loaded.system_tokens = system_block_tokens(model, chat_template, loaded.messages);
    return loaded;
}

}  // namespace kvstash::session_file
