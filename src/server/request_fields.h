// Reading one field of a JSON request body with its type and range checked: every failure is a 400
// ApiError naming the field as `param` ("'top_p' must be between 0 and 1"). No model needed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstash/chat.h"
#include "server/api_error.h"

namespace kvstash::server {

// The field, or null when absent or JSON null (OpenAI treats both as "not given").
const nlohmann::json* field(const nlohmann::json& body, const char* name);

// 400 "'name' must be <expected>", code invalid_type.
ApiError wrong_type(const char* name, const char* expected);

int64_t get_int(const nlohmann::json& value, const char* name, int64_t min, int64_t max);
double get_number(const nlohmann::json& value, const char* name, double min, double max);
bool get_bool(const nlohmann::json& value, const char* name);
std::string get_string(const nlohmann::json& value, const char* name);

// `messages`: a non-empty array of {role: system|user|assistant|tool, content: string | [text parts]}; an
// assistant message may carry tool_calls (then content may be null), a tool message a tool_call_id.
std::vector<ChatMessage> get_messages(const nlohmann::json& value);

}  // namespace kvstash::server
