#include "text/tool_call_parse.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "base/json_depth.h"

namespace kvstash {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kLlamaStart = "{\"name\"";

std::string_view trim(std::string_view s) {
    const size_t a = s.find_first_not_of(" \t\r\n");
    if (a == std::string_view::npos) return {};
    return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// {"name": N, <key>: {...}} -> a call; none for anything else.
std::optional<ToolCall> read_call(std::string_view json_text, const char* key) {
    // Deeper output is text, not a call: rendering it back would recurse once per level.
    if (json_depth::nesting_depth(json_text, json_depth::kMaxJsonDepth) > json_depth::kMaxJsonDepth)
        return std::nullopt;
    ordered_json value;
    try {
        value = ordered_json::parse(json_text);
    } catch (const nlohmann::json::exception&) {
        return std::nullopt;
    }
    if (!value.is_object() || !value.contains("name") || !value["name"].is_string()) return std::nullopt;
    const ordered_json* args = nullptr;
    for (const char* k : {key, "arguments", "parameters"}) {
        if (value.contains(k)) {
            args = &value[k];
            break;
        }
    }
    if (!args || !args->is_object()) return std::nullopt;
    return ToolCall{"", value["name"].get<std::string>(), args->dump()};
}

}  // namespace

ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text) {
    ParsedToolCalls none{std::string(text), {}};
    if (format == ToolCallFormat::llama3) {
        const std::string_view body = trim(text);
        if (!body.starts_with(kLlamaStart)) return none;
        auto call = read_call(body, "parameters");
        if (!call) return none;
        return {"", {std::move(*call)}};
    }
    if (format != ToolCallFormat::qwen) return none;
    const size_t first = text.find(kOpen);
    if (first == std::string_view::npos) return none;
    ParsedToolCalls out;
    out.content = std::string(text.substr(0, first));
    out.content.erase(out.content.find_last_not_of(" \t\r\n") + 1);
    for (size_t pos = first; pos != std::string_view::npos; pos = text.find(kOpen, pos)) {
        const size_t body = pos + kOpen.size();
        const size_t close = text.find(kClose, body);
        if (close == std::string_view::npos) return none;
        auto call = read_call(trim(text.substr(body, close - body)), "arguments");
        if (!call) return none;
        out.calls.push_back(std::move(*call));
        pos = close + kClose.size();
        // Only whitespace may separate calls or follow the last one.
        const size_t next = text.find_first_not_of(" \t\r\n", pos);
        if (next != std::string_view::npos && text.substr(next, kOpen.size()) != kOpen) return none;
    }
    return out;
}

size_t tool_call_free_prefix(ToolCallFormat format, std::string_view text) {
    if (format == ToolCallFormat::llama3) {
        const std::string_view body = text.substr(std::min(text.size(), text.find_first_not_of(" \t\r\n")));
        if (body.empty()) return 0;  // only whitespace yet: a call may still come
        const size_t n = std::min(body.size(), kLlamaStart.size());
        return body.substr(0, n) == kLlamaStart.substr(0, n) ? 0 : text.size();
    }
    if (format != ToolCallFormat::qwen) return text.size();
    const size_t open = text.find(kOpen);
    if (open != std::string_view::npos) return open;
    // Hold back a tail that could be the start of "<tool_call>".
    for (size_t keep = std::min(text.size(), kOpen.size() - 1); keep > 0; --keep) {
        if (text.substr(text.size() - keep) == kOpen.substr(0, keep)) return text.size() - keep;
    }
    return text.size();
}

}  // namespace kvstash
