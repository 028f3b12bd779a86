#include "server/ollama_request.h"

#include <cctype>
#include <initializer_list>
#include <limits>
#include <string_view>

#include "server/api_error.h"
#include "server/request_fields.h"

using nlohmann::json;

namespace kvstash::server {
namespace {

void require_known_fields(const json& body, std::initializer_list<std::string_view> known, const char* route) {
    for (const auto& [key, value] : body.items()) {
        bool found = false;
        for (const std::string_view k : known) found |= key == k;
        if (!found) {
            throw bad_request("unknown field '" + key + "' for " + route + "; kvstash does not know what it means here",
                              key, "unsupported");
        }
    }
}

// A field that must be absent, null, false or empty: kvstash has nothing that would honour it.
void refuse_if_set(const json& body, const char* name, const std::string& why) {
    const json* v = field(body, name);
    if (!v) return;
    const bool empty = (v->is_boolean() && !v->get<bool>()) || (v->is_string() && v->get<std::string>().empty()) ||
                       ((v->is_array() || v->is_object()) && v->empty());
    if (!empty) throw bad_request(std::string("'") + name + "' is not supported: " + why, name, "unsupported");
}

// Ollama's tool_calls ({"function": {"name", "arguments": {...}}}) in OpenAI's shape (arguments as JSON text).
json openai_tool_calls(const json& calls, size_t message) {
    if (!calls.is_array()) throw wrong_type("messages", "an array of messages whose tool_calls are arrays");
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        const json* function = calls[i].is_object() ? field(calls[i], "function") : nullptr;
        if (!function || !function->is_object() || !field(*function, "name")) {
            throw bad_request("messages[" + std::to_string(message) + "].tool_calls[" + std::to_string(i) +
                                  "] must be {\"function\": {\"name\": ..., \"arguments\": {...}}}",
                              "messages", "invalid_value");
        }
        const json* arguments = field(*function, "arguments");
        out.push_back({{"id", "call_" + std::to_string(message) + "_" + std::to_string(i)},
                       {"type", "function"},
                       {"function",
                        {{"name", (*function)["name"]},
                         {"arguments",
                          arguments ? (arguments->is_string() ? *arguments : json(arguments->dump())) : json("{}")}}}});
    }
    return out;
}

json openai_messages(const json& messages) {
    if (!messages.is_array()) throw wrong_type("messages", "an array of {role, content} objects");
    json out = json::array();
    for (size_t i = 0; i < messages.size(); ++i) {
        const json& m = messages[i];
        if (!m.is_object()) throw wrong_type("messages", "an array of {role, content} objects");
        require_known_fields(m, {"role", "content", "images", "thinking", "tool_calls", "tool_name"}, "a message");
        refuse_if_set(m, "images", "kvstash runs text models (no vision)");
        refuse_if_set(m, "thinking", "kvstash's models do not think separately; put it in content");
        json message = {{"role", m.value("role", json())}, {"content", m.value("content", json(""))}};
        if (message["content"].is_null()) message["content"] = "";
        if (const json* calls = field(m, "tool_calls"); calls && !calls->empty()) {
            message["tool_calls"] = openai_tool_calls(*calls, i);
        }
        if (const json* name = field(m, "tool_name")) message["tool_call_id"] = get_string(*name, "tool_name");
        out.push_back(std::move(message));
    }
    return out;
}

// format: "json", a JSON Schema object, or "" / absent (free text).
void add_format(const json& body, json& openai) {
    const json* format = field(body, "format");
    if (!format || (format->is_string() && format->get<std::string>().empty())) return;
    if (format->is_string() && format->get<std::string>() == "json") {
        openai["response_format"] = {{"type", "json_object"}};
    } else if (format->is_object()) {
        openai["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", *format}}}};
    } else {
        throw bad_request("'format' must be \"json\" or a JSON Schema object", "format", "invalid_value");
    }
}

float option_number(const json& options, const char* name, double min, double max, float fallback) {
    const json* v = field(options, name);
    return v ? static_cast<float>(get_number(*v, name, min, max)) : fallback;
}

// Options that would change something kvstash does not have (GPU offload, batch sizes, memory mapping, other
// samplers): refused unless they hold the value that changes nothing.
void refuse_meaningless_options(const json& options) {
    for (const auto& [key, value] : options.items()) {
        const bool neutral = (key == "typical_p" && value == 1) || (key == "tfs_z" && value == 1) ||
                             (key == "mirostat" && value == 0) || (key == "numa" && value == false);
        if (neutral) continue;
        static constexpr std::string_view known[] = {
            "temperature",       "top_k", "top_p", "min_p",       "repeat_penalty", "repeat_last_n", "presence_penalty",
            "frequency_penalty", "seed",  "stop",  "num_predict", "num_ctx"};
        bool found = false;
        for (const std::string_view k : known) found |= key == k;
        if (found) continue;
        throw bad_request("options." + key +
                              " has no meaning in kvstash (it runs on the CPU with the threads, context and KV type "
                              "chosen at `kvstash serve`; other samplers than temperature, top_k, top_p, min_p and "
                              "the penalties do not exist here); remove it",
                          "options", "unsupported");
    }
}

void apply_options(const json& body, OllamaRequest& out, json& openai) {
    SamplerParams& p = out.completion.sampling;
    // Ollama's defaults.
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.9f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.1f;
    p.repeat_last_n = 64;
    const json* options = field(body, "options");
    if (!options) return;
    if (!options->is_object()) throw wrong_type("options", "an object");
    refuse_meaningless_options(*options);
    p.temperature = option_number(*options, "temperature", 0.0, 100.0, p.temperature);
    p.top_p = option_number(*options, "top_p", 0.0, 1.0, p.top_p);
    p.min_p = option_number(*options, "min_p", 0.0, 1.0, p.min_p);
    p.repeat_penalty = option_number(*options, "repeat_penalty", 1e-6, 100.0, p.repeat_penalty);
    p.presence_penalty = option_number(*options, "presence_penalty", -100.0, 100.0, p.presence_penalty);
    p.frequency_penalty = option_number(*options, "frequency_penalty", -100.0, 100.0, p.frequency_penalty);
    if (const json* v = field(*options, "top_k")) p.top_k = static_cast<int32_t>(get_int(*v, "top_k", 0, 1 << 20));
    if (const json* v = field(*options, "repeat_last_n")) {
        p.repeat_last_n = static_cast<int32_t>(get_int(*v, "repeat_last_n", -1, 1 << 24));
    }
    if (const json* v = field(*options, "seed")) {
        out.completion.seed = static_cast<uint64_t>(
            get_int(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    }
    if (const json* v = field(*options, "num_predict")) {
        const int64_t n = get_int(*v, "num_predict", -2, std::numeric_limits<int32_t>::max());
        if (n == 0) throw bad_request("'num_predict' 0 asks for nothing; give a positive count or -1", "num_predict");
        if (n > 0) out.num_predict = n;
    }
    if (const json* v = field(*options, "num_ctx")) out.num_ctx = get_int(*v, "num_ctx", 1, int64_t{1} << 24);
    if (const json* v = field(*options, "stop")) openai["stop"] = *v;
}

// The translated body's `tools` and JSON Schema `format` as the client wrote them (keys in their order: tools
// reach the prompt so, a schema's properties are generated so), for parse_completion_request's raw_body.
std::string written_order_body(const std::string* raw_body) {
    if (!raw_body) return {};
    try {
        const auto written = nlohmann::ordered_json::parse(*raw_body);
        nlohmann::ordered_json out = nlohmann::ordered_json::object();
        if (written.contains("tools")) out["tools"] = written["tools"];
        if (written.contains("format") && written["format"].is_object()) {
            out["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", written["format"]}}}};
        }
        return out.dump();
    } catch (const nlohmann::json::exception&) {
        return {};  // then the keys are read in sorted order
    }
}

}  // namespace

void check_keep_alive(const json& body) {
    const json* v = field(body, "keep_alive");
    if (!v || v->is_number()) return;
    const std::string text = v->is_string() ? v->get<std::string>() : "";
    // Go's time.ParseDuration forms Ollama takes: "-1", "0", "300", "5m", "1h30m", "2.5s".
    bool ok = v->is_string() && !text.empty();
    for (size_t i = 0; ok && i < text.size(); ++i) {
        const char c = text[i];
        ok = std::isdigit(static_cast<unsigned char>(c)) || c == '.' || (c == '-' && i == 0) || c == 'h' || c == 'm' ||
             c == 's' || c == 'u' || c == 'n';
    }
    if (!ok) throw bad_request("'keep_alive' must be a number of seconds or a duration like \"5m\"", "keep_alive");
}

OllamaRequest parse_ollama_request(const json& body, OllamaEndpoint endpoint, const RequestLimits& limits,
                                   const std::string* raw_body) {
    const bool chat = endpoint == OllamaEndpoint::chat;
    if (chat) {
        require_known_fields(body,
                             {"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think",
                              "logprobs", "top_logprobs"},
                             "/api/chat");
    } else {
        require_known_fields(body,
                             {"model", "prompt", "suffix", "system", "template", "context", "stream", "raw", "format",
                              "images", "options", "keep_alive", "think", "logprobs", "top_logprobs"},
                             "/api/generate");
        refuse_if_set(body, "suffix", "fill-in-the-middle is not implemented");
        refuse_if_set(body, "template", "kvstash renders with the model's chat template (serve --chat-template)");
        refuse_if_set(body, "context",
                      "send the conversation as /api/chat messages: the prefix cache reuses its computed tokens");
        refuse_if_set(body, "images", "kvstash runs text models (no vision)");
    }
    refuse_if_set(body, "think", "kvstash's models do not think separately");
    refuse_if_set(body, "logprobs", "use /v1/chat/completions with logprobs");
    refuse_if_set(body, "top_logprobs", "use /v1/chat/completions with top_logprobs");
    check_keep_alive(body);

    OllamaRequest out;
    const json* model = field(body, "model");
    if (!model || !model->is_string() || model->get<std::string>().empty()) {
        throw bad_request("'model' is required (see GET /api/tags)", "model", "missing_field");
    }
    out.model = model->get<std::string>();
    if (const json* v = field(body, "stream")) out.stream = get_bool(*v, "stream");

    json openai = json::object();
    Endpoint openai_endpoint = Endpoint::chat;
    if (chat) {
        const json* messages = field(body, "messages");
        if (!messages) throw bad_request("'messages' is required", "messages", "missing_field");
        if (messages->is_array() && messages->empty()) {
            out.load_only = true;  // Ollama's way of loading a model through /api/chat
        } else {
            openai["messages"] = openai_messages(*messages);
        }
        if (const json* tools = field(body, "tools"); tools && !tools->empty()) openai["tools"] = *tools;
    } else {
        const json* prompt = field(body, "prompt");
        const std::string text = prompt ? get_string(*prompt, "prompt") : "";
        bool raw = false;
        if (const json* v = field(body, "raw")) raw = get_bool(*v, "raw");
        const json* system = field(body, "system");
        if (text.empty()) {
            out.load_only = true;  // Ollama's way of loading a model: nothing to generate
        } else if (raw) {
            if (system) throw bad_request("'system' needs the chat template; it cannot go with raw: true", "system");
            openai["prompt"] = text;
            openai_endpoint = Endpoint::text;
        } else {
            json messages = json::array();
            if (system) messages.push_back({{"role", "system"}, {"content", get_string(*system, "system")}});
            messages.push_back({{"role", "user"}, {"content", text}});
            openai["messages"] = messages;
        }
    }
    add_format(body, openai);
    apply_options(body, out, openai);
    if (out.load_only) return out;
    const SamplerParams sampling = out.completion.sampling;
    const std::optional<uint64_t> seed = out.completion.seed;
    const std::string openai_raw = written_order_body(raw_body);
    out.completion =
        parse_completion_request(openai, openai_endpoint, limits, openai_raw.empty() ? nullptr : &openai_raw);
    out.completion.sampling = sampling;
    out.completion.seed = seed;
    return out;
}

}  // namespace kvstash::server
