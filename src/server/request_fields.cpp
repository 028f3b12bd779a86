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
        if (message.role != "system" && message.role != "user" && message.role != "assistant") {
            throw bad_request("unsupported message role '" + message.role + "' (use system, user or assistant)",
                              "messages", "invalid_value");
        }
        const json* content = field(m, "content");
        // OpenAI allows a null (or missing) content only for an assistant message that carries tool_calls;
        // kvstash has no tools, so every message needs its text.
        if (!content) {
            throw bad_request("messages[" + std::to_string(i) + "].content is " +
                                  (m.contains("content") ? "null" : "missing") +
                                  ": give a string or an array of text parts (null content is for tool calls, "
                                  "which this server does not support)",
                              "messages", "invalid_value");
        }
        if (content && content->is_string()) {
            message.content = content->get<std::string>();
        } else if (content && content->is_array()) {
            // Content parts: only text parts can be read by a text model.
            for (const json& part : *content) {
                if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                    !part["text"].is_string()) {
                    throw bad_request("message content parts must be {\"type\": \"text\", \"text\": \"...\"}",
                                      "messages", "invalid_value");
                }
                message.content += part["text"].get<std::string>();
            }
        } else if (content) {
            throw wrong_type("messages", "an array of objects whose 'content' is a string or an array of text parts");
        }
        messages.push_back(std::move(message));
    }
    return messages;
}

}  // namespace kvstash::server
