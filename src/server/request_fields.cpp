#include "server/request_fields.h"

using nlohmann::json;

namespace kvstash::server {

const json* field(const json& body, const char* name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}

ApiError wrong_type(const char* name, const char* expected) {
    return bad_request(std::string("'") + name + "' must be " + expected, name, "invalid_type");
}

int64_t get_int(const json& value, const char* name, int64_t min, int64_t max) {
    if (!value.is_number_integer()) throw wrong_type(name, "an integer");
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(max)) {
        throw bad_request("'" + std::string(name) + "' must be at most " + std::to_string(max), name, "invalid_value");
    }
    const int64_t v = value.get<int64_t>();
    if (v < min || v > max) {
        throw bad_request("'" + std::string(name) + "' must be between " + std::to_string(min) + " and " +
                              std::to_string(max) + ", got " + std::to_string(v),
                          name, "invalid_value");
    }
    return v;
}

double get_number(const json& value, const char* name, double min, double max) {
    if (!value.is_number()) throw wrong_type(name, "a number");
    const double v = value.get<double>();
    if (!(v >= min && v <= max)) {
        throw bad_request(
            "'" + std::string(name) + "' must be between " + std::to_string(min) + " and " + std::to_string(max), name,
            "invalid_value");
    }
    return v;
}

bool get_bool(const json& value, const char* name) {
    if (!value.is_boolean()) throw wrong_type(name, "true or false");
    return value.get<bool>();
}

std::string get_string(const json& value, const char* name) {
    if (!value.is_string()) throw wrong_type(name, "a string");
    return value.get<std::string>();
}

namespace {

// A message's content: a string, or text parts joined.
std::string get_content(const json& content) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) {
        throw wrong_type("messages", "an array of objects whose 'content' is a string or an array of text parts");
    }
    // Content parts: only text parts can be read by a text model.
    std::string text;
    for (const json& part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
            throw bad_request("message content parts must be {\"type\": \"text\", \"text\": \"...\"}", "messages",
                              "invalid_value");
        }
        text += part["text"].get<std::string>();
    }
    return text;
}

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments: JSON text}}].
std::vector<ToolCall> get_tool_calls(const json& value, size_t index) {
    const std::string where = "messages[" + std::to_string(index) + "].tool_calls";
    const auto bad = [&](const std::string& what) {
        return bad_request(where + ": " + what, "messages", "invalid_value");
    };
    if (!value.is_array()) throw bad("must be an array");
    std::vector<ToolCall> calls;
    for (const json& call : value) {
        if (!call.is_object()) throw bad("each call must be an object");
        if (call.contains("type") && call["type"] != "function")
            throw bad("only calls of type 'function' are supported");
        const json* function = field(call, "function");
        if (!function || !function->is_object()) throw bad("each call needs a 'function' object");
        const json* name = field(*function, "name");
        const json* arguments = field(*function, "arguments");
        if (!name || !name->is_string()) throw bad("a call's function needs a string 'name'");
        ToolCall out{call.value("id", ""), name->get<std::string>(), "{}"};
        if (arguments && arguments->is_string()) {
            out.arguments = arguments->get<std::string>();
            json parsed;
            try {
                parsed = json::parse(out.arguments);
            } catch (const json::exception&) {
                throw bad("the arguments of '" + out.name + "' are not valid JSON");
            }
            if (!parsed.is_object()) throw bad("the arguments of '" + out.name + "' must be a JSON object");
        } else if (arguments && arguments->is_object()) {
            out.arguments = arguments->dump();  // some clients send the object itself
        } else if (arguments) {
            throw bad("a call's 'arguments' must be a JSON string");
        }
        calls.push_back(std::move(out));
    }
    return calls;
}

}  // namespace

std::vector<ChatMessage> get_messages(const json& value) {
    if (!value.is_array() || value.empty())
        throw wrong_type("messages", "a non-empty array of {role, content} objects");
    std::vector<ChatMessage> messages;
    for (size_t i = 0; i < value.size(); ++i) {
        const json& m = value[i];
        if (!m.is_object()) throw wrong_type("messages", "an array of {role, content} objects");
        const json* role = field(m, "role");
        if (!role || !role->is_string()) throw wrong_type("messages", "an array of objects with a string 'role'");
        ChatMessage message{role->get<std::string>(), {}};
        if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
            message.role != "tool") {
            throw bad_request("unsupported message role '" + message.role + "' (use system, user, assistant or tool)",
                              "messages", "invalid_value");
        }
        if (const json* calls = field(m, "tool_calls")) {
            if (message.role != "assistant") {
                throw bad_request("messages[" + std::to_string(i) + "] has tool_calls but is not an assistant message",
                                  "messages", "invalid_value");
            }
            message.tool_calls = get_tool_calls(*calls, i);
        }
        if (message.role == "tool") {
            if (const json* id = field(m, "tool_call_id")) message.tool_call_id = get_string(*id, "messages");
        }
        const json* content = field(m, "content");
        // OpenAI allows a null (or missing) content only for an assistant message that carries tool_calls.
        if (!content && message.tool_calls.empty()) {
            throw bad_request("messages[" + std::to_string(i) + "].content is " +
                                  (m.contains("content") ? "null" : "missing") +
                                  ": give a string or an array of text parts (null content is only for an "
                                  "assistant message with tool_calls)",
                              "messages", "invalid_value");
        }
        if (content) message.content = get_content(*content);
        messages.push_back(std::move(message));
    }
    return messages;
}

}  // namespace kvstash::server
