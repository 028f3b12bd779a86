// The errors the HTTP API answers with: an HTTP status and an OpenAI-style error object
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": "..."}}.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace kvstash::server {

class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string message, std::string param = {}, std::string code = {})
        : std::runtime_error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
    int status() const { return status_; }
    const std::string& param() const { return param_; }
    const std::string& code() const { return code_; }

private:
    int status_;
    std::string param_;
    std::string code_;
};

// 400 for a bad field, with the field's name as `param`.
inline ApiError bad_request(std::string message, std::string param = {}, std::string code = {}) {
    return ApiError(400, std::move(message), std::move(param), std::move(code));
}

// The OpenAI error type for a status: invalid_request_error, authentication_error, not_found_error, ...
const char* error_type(int status);
// {"error": {...}}; empty param / code become null.
nlohmann::json error_json(int status, const std::string& message, const std::string& param = {},
                          const std::string& code = {});
// JSON text for the wire: invalid UTF-8 (a token's bytes can be part of a character) is replaced by U+FFFD
// instead of throwing.
std::string dump_json(const nlohmann::json& value);

}  // namespace kvstash::server
