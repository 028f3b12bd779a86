#include "server/ollama_response.h"

#include <ctime>

#include "server/api_error.h"
#include "text/tool_call_parse.h"

using nlohmann::json;

namespace kvstash::server {
namespace {

int64_t nanoseconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

// Ollama's tool_calls: arguments as a JSON object (OpenAI's are text).
json ollama_tool_calls(const std::vector<ToolCall>& calls) {
    json out = json::array();
    for (const ToolCall& call : calls) {
        json arguments = json::object();
        try {
            arguments = json::parse(call.arguments);
        } catch (const json::exception&) {
            arguments = json::object();
        }
        out.push_back({{"function", {{"name", call.name}, {"arguments", arguments}}}});
    }
    return out;
}

}  // namespace

std::string ollama_timestamp() {
    const auto now = std::chrono::system_clock::now();
    const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
    const auto nanos =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count() % 1000000000;
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char text[64];
    const size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
    std::snprintf(text + n, sizeof text - n, ".%09lldZ", static_cast<long long>(nanos));
    return text;
}

OllamaFormatter::OllamaFormatter(OllamaEndpoint endpoint, std::string model, ToolCallFormat tool_format)
    : endpoint_(endpoint), model_(std::move(model)), tool_format_(tool_format) {}

json OllamaFormatter::envelope() const { return {{"model", model_}, {"created_at", ollama_timestamp()}}; }

json OllamaFormatter::content_json(const std::string& text) const {
    if (endpoint_ == OllamaEndpoint::generate) return {{"response", text}};
    return {{"message", {{"role", "assistant"}, {"content", text}}}};
}

void OllamaFormatter::add_stats(json& out, const Usage& usage) const {
    const auto end = std::chrono::steady_clock::now();
    const auto first = first_piece_ == std::chrono::steady_clock::time_point{} ? end : first_piece_;
    out["done"] = true;
    out["done_reason"] = finish_reason_;
    out["total_duration"] = nanoseconds(end - start_);
    out["load_duration"] = 0;  // the model is loaded when the server starts
    out["prompt_eval_count"] = usage.prompt_tokens - usage.cached_tokens;
    out["prompt_eval_duration"] = nanoseconds(first - start_);
    out["eval_count"] = usage.completion_tokens;
    out["eval_duration"] = nanoseconds(end - first);
}

void OllamaFormatter::add(const ChannelEvent& event) {
    if (event.kind == ChannelEvent::Kind::piece) {
        if (first_piece_ == std::chrono::steady_clock::time_point{}) first_piece_ = std::chrono::steady_clock::now();
        text_ += event.text;
    } else if (event.kind == ChannelEvent::Kind::finish) {
        finish_reason_ = event.finish_reason;
    }
}

std::string OllamaFormatter::piece_line(const ChannelEvent& piece) {
    add(piece);
    if (piece.kind != ChannelEvent::Kind::piece) return {};
    size_t free = text_.size();
    if (tool_format_ != ToolCallFormat::none) free = std::max(sent_, tool_call_free_prefix(tool_format_, text_));
    if (free <= sent_) return {};
    json line = envelope();
    line.update(content_json(text_.substr(sent_, free - sent_)));
    line["done"] = false;
    sent_ = free;
    return dump_json(line) + "\n";
}

std::string OllamaFormatter::final_line(const Usage& usage) {
    json line = envelope();
    const ParsedToolCalls parsed =
        tool_format_ != ToolCallFormat::none ? parse_tool_calls(tool_format_, text_) : ParsedToolCalls{};
    line.update(content_json(parsed.calls.empty() ? text_.substr(std::min(sent_, text_.size())) : std::string()));
    if (!parsed.calls.empty()) line["message"]["tool_calls"] = ollama_tool_calls(parsed.calls);
    add_stats(line, usage);
    return dump_json(line) + "\n";
}

json OllamaFormatter::response(const Usage& usage) {
    json out = envelope();
    const ParsedToolCalls parsed =
        tool_format_ != ToolCallFormat::none ? parse_tool_calls(tool_format_, text_) : ParsedToolCalls{};
    if (parsed.calls.empty()) {
        out.update(content_json(text_));
    } else {
        out.update(content_json(parsed.content));
        out["message"]["tool_calls"] = ollama_tool_calls(parsed.calls);
    }
    add_stats(out, usage);
    return out;
}

}  // namespace kvstash::server
