// POST /v1/responses: OpenAI's Responses API (what current OpenAI SDK examples call:
// client.responses.create), streamed (its typed SSE events) and not. A request is read as a chat
// completion: `instructions` -> a system message, `input` (a string, or messages whose content is a
// string or input_text / output_text parts) -> the conversation, max_output_tokens -> max_tokens,
// text.format (json_schema / json_object) -> response_format. The reply is one output message with one
// output_text part; status "incomplete" (reason max_output_tokens) when it was cut. Not supported (400
// naming the field): tools, previous_response_id (nothing is stored), non-text input parts.
#include <chrono>
#include <random>

#include "server/completion_run.h"
#include "server/openai_request.h"
#include "server/request_job.h"
#include "server/request_log.h"
#include "server/routes.h"

using nlohmann::json;
using nlohmann::ordered_json;

namespace kvstash::server {
namespace {

std::string random_id(const char* prefix) {
    static constexpr char digits[] = "0123456789abcdef";
    std::random_device device;
    std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device());
    std::string id = prefix;
    for (int i = 0; i < 32; ++i) id += digits[rng() % 16];
    return id;
}

// A message's content as text: a string, or the text of its input_text / output_text / text parts.
std::string content_text(const ordered_json& content, size_t index) {
    if (content.is_string()) return content.get<std::string>();
    const std::string at = "input[" + std::to_string(index) + "].content";
    if (!content.is_array()) throw bad_request(at + " must be a string or an array of parts", "input", "invalid_type");
    std::string text;
    for (const auto& part : content) {
        const std::string type = part.is_object() && part.contains("type") && part["type"].is_string()
                                     ? part["type"].get<std::string>()
                                     : std::string();
        if ((type == "input_text" || type == "output_text" || type == "text") && part.contains("text") &&
            part["text"].is_string()) {
            text += part["text"].get<std::string>();
        } else {
            throw bad_request(at + ": only text parts (input_text, output_text) are supported, not '" + type + "'",
                              "input", "unsupported");
        }
    }
    return text;
}

// The Responses body as a /v1/chat/completions one (keys in the client's order: a schema keeps it).
ordered_json chat_body(const ordered_json& body) {
    for (const char* name : {"previous_response_id", "conversation"}) {
        if (body.contains(name) && !body[name].is_null())
            throw bad_request(std::string("'") + name + "' is not supported (kvstash stores no responses)", name,
                              "unsupported");
    }
    if (body.contains("tools") && body["tools"].is_array() && !body["tools"].empty())
        throw bad_request("'tools' are not supported on /v1/responses (use /v1/chat/completions)", "tools",
                          "unsupported");
    ordered_json messages = ordered_json::array();
    if (body.contains("instructions") && body["instructions"].is_string())
        messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
    if (!body.contains("input")) throw bad_request("'input' is required", "input", "missing_field");
    const ordered_json& input = body["input"];
    if (input.is_string()) {
        messages.push_back({{"role", "user"}, {"content", input}});
    } else if (input.is_array()) {
        for (size_t i = 0; i < input.size(); ++i) {
            const ordered_json& item = input[i];
            const bool message =
                item.is_object() && item.contains("role") && (!item.contains("type") || item["type"] == "message");
            if (!message) {
                throw bad_request("input[" + std::to_string(i) + "]: only messages (role and content) are supported",
                                  "input", "unsupported");
            }
            std::string role = item["role"].is_string() ? item["role"].get<std::string>() : std::string();
            if (role == "developer") role = "system";
            messages.push_back(
                {{"role", role}, {"content", content_text(item.contains("content") ? item["content"] : "", i)}});
        }
    } else {
        throw bad_request("'input' must be a string or an array of messages", "input", "invalid_type");
    }
    ordered_json out = {{"messages", messages}};
    for (const char* same : {"temperature", "top_p", "stream", "seed"}) {
        if (body.contains(same)) out[same] = body[same];
    }
    if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null())
        out["max_tokens"] = body["max_output_tokens"];
    if (body.contains("text") && body["text"].is_object() && body["text"].contains("format")) {
        const ordered_json& format = body["text"]["format"];
        const std::string type = format.is_object() && format.contains("type") && format["type"].is_string()
                                     ? format["type"].get<std::string>()
                                     : std::string();
        if (type == "json_schema") {
            if (!format.contains("schema"))
                throw bad_request("'text.format.schema' is required", "text.format", "missing_field");
            out["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", format["schema"]}}}};
        } else if (type == "json_object") {
            out["response_format"] = {{"type", "json_object"}};
        } else if (type != "text") {
            throw bad_request("text.format type '" + type + "' is not supported (text, json_object, json_schema)",
                              "text.format", "unsupported");
        }
    }
    return out;
}

// One response as it is generated, and its JSON at any point.
struct ResponseDraft {
    std::string id = random_id("resp_");
    std::string message_id = random_id("msg_");
    int64_t created_at =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::string model;
    json request_echo;  // instructions, max_output_tokens, temperature, top_p, text, as the request gave them
    std::string text;
    std::string finish_reason;
    int sequence = 0;  // streaming: the next event's sequence_number

    json part(bool done) const {
        return {{"type", "output_text"},
                {"text", done ? text : std::string()},
                {"annotations", json::array()},
                {"logprobs", json::array()}};
    }
    json item(const char* status, bool with_content) const {
        return {{"id", message_id},
                {"type", "message"},
                {"status", status},
                {"role", "assistant"},
                {"content", with_content ? json::array({part(true)}) : json::array()}};
    }
    json object(const char* status, const Usage* usage) const {
        const bool cut = finish_reason == "length";
        json out = {{"id", id},
                    {"object", "response"},
                    {"created_at", created_at},
                    {"status", status},
                    {"error", nullptr},
                    {"incomplete_details", cut ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
                    {"model", model},
                    {"output", usage ? json::array({item(cut ? "incomplete" : "completed", true)}) : json::array()},
                    {"parallel_tool_calls", true},
                    {"previous_response_id", nullptr},
                    {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
                    {"store", false},
                    {"tool_choice", "auto"},
                    {"tools", json::array()},
                    {"truncation", "disabled"},
                    {"metadata", json::object()},
                    {"user", nullptr},
                    {"usage", nullptr}};
        for (const auto& [key, value] : request_echo.items()) out[key] = value;
        if (usage) {
            out["usage"] = {{"input_tokens", usage->prompt_tokens},
                            {"input_tokens_details", {{"cached_tokens", usage->cached_tokens}}},
                            {"output_tokens", usage->completion_tokens},
                            {"output_tokens_details", {{"reasoning_tokens", 0}}},
                            {"total_tokens", usage->prompt_tokens + usage->completion_tokens}};
        }
        return out;
    }
    // One SSE event: "event: TYPE" and its data, which repeats the type and carries sequence_number.
    std::string event(const char* type, json data) {
        data["type"] = type;
        data["sequence_number"] = sequence++;
        return std::string("event: ") + type + "\ndata: " + dump_json(data) + "\n\n";
    }
    std::string opening() {
        std::string out = event("response.created", {{"response", object("in_progress", nullptr)}});
        out += event("response.in_progress", {{"response", object("in_progress", nullptr)}});
        out += event("response.output_item.added", {{"output_index", 0}, {"item", item("in_progress", false)}});
        out += event("response.content_part.added",
                     {{"item_id", message_id}, {"output_index", 0}, {"content_index", 0}, {"part", part(false)}});
        return out;
    }
    std::string delta(const std::string& piece) {
        text += piece;
        return event("response.output_text.delta", {{"item_id", message_id},
                                                    {"output_index", 0},
                                                    {"content_index", 0},
                                                    {"delta", piece},
                                                    {"logprobs", json::array()}});
    }
    std::string closing(const Usage& usage) {
        const bool cut = finish_reason == "length";
        std::string out = event("response.output_text.done", {{"item_id", message_id},
                                                              {"output_index", 0},
                                                              {"content_index", 0},
                                                              {"text", text},
                                                              {"logprobs", json::array()}});
        out += event("response.content_part.done",
                     {{"item_id", message_id}, {"output_index", 0}, {"content_index", 0}, {"part", part(true)}});
        out += event("response.output_item.done",
                     {{"output_index", 0}, {"item", item(cut ? "incomplete" : "completed", true)}});
        const char* status = cut ? "incomplete" : "completed";
        out += event(cut ? "response.incomplete" : "response.completed", {{"response", object(status, &usage)}});
        return out;
    }
};

json request_echo(const json& body) {
    json out = {{"instructions", nullptr},
                {"max_output_tokens", nullptr},
                {"temperature", 1.0},
                {"top_p", 1.0},
                {"text", {{"format", {{"type", "text"}}}}}};
    for (const char* key : {"instructions", "max_output_tokens", "temperature", "top_p", "text", "metadata", "user"}) {
        if (body.contains(key) && !body[key].is_null()) out[key] = body[key];
    }
    return out;
}

void handle_responses(const httplib::Request& req, httplib::Response& res, ServerContext& ctx) {
    require_body_size(req, ctx);
    const json body = parse_json_body(req.body);
    const std::string translated = chat_body(ordered_json::parse(req.body)).dump();
    const CompletionRequest request =
        parse_completion_request(parse_json_body(translated), Endpoint::chat, request_limits(ctx), &translated);
    auto run = std::make_shared<CompletionRun>(ctx, request);
    auto draft = std::make_shared<ResponseDraft>();
    draft->model = ctx.model_id;
    draft->request_echo = request_echo(body);
    if (!request.stream) {
        const Usage usage = wait_for_run(*run, [&](const ChannelEvent& event) {
            if (event.kind == ChannelEvent::Kind::piece) draft->text += event.text;
            if (event.kind == ChannelEvent::Kind::finish) draft->finish_reason = event.finish_reason;
        });
        send_json(res, draft->object(draft->finish_reason == "length" ? "incomplete" : "completed", &usage));
        return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [run, draft, opened = false](size_t, httplib::DataSink& sink) mutable {
            auto write = [&](const std::string& text) {
                if (text.empty() || sink.write(text.data(), text.size())) return true;
                run->cancel();
                return false;
            };
            if (!opened) {
                opened = true;
                if (!write(draft->opening())) return false;
            }
            std::vector<ChannelEvent> events;
            while (!run->wait(events, std::chrono::milliseconds(100))) {
                if (!sink.is_writable()) {
                    run->cancel();
                    return false;
                }
            }
            for (const ChannelEvent& event : events) {
                switch (event.kind) {
                    case ChannelEvent::Kind::piece:
                        request_log_first_token();
                        if (!event.text.empty() && !write(draft->delta(event.text))) return false;
                        break;
                    case ChannelEvent::Kind::finish: draft->finish_reason = event.finish_reason; break;
                    case ChannelEvent::Kind::done:
                        write(draft->closing(event.usage));
                        sink.done();
                        return true;
                    case ChannelEvent::Kind::error:
                        write(draft->event(
                            "error",
                            {{"code", std::to_string(event.status)}, {"message", event.message}, {"param", nullptr}}));
                        sink.done();
                        return true;
                }
            }
            return true;
        },
        [run](bool success) {
            if (!success) run->cancel();
        });
}

}  // namespace

void register_responses_routes(RouteTable& http, ServerContext& ctx) {
    http.Post("/v1/responses", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] { handle_responses(req, res, ctx); });
    });
}

}  // namespace kvstash::server
