// The errors the HTTP API answers with: an HTTP status and an OpenAI-style error object
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": "..."}}.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "kvstash/error.h"

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

// The one place a library ErrorCode becomes an HTTP status. The rule is who can fix it:
//   400 invalid_argument, out_of_range, unsupported: the request asked for a bad value, more tokens than
//       the context holds, or something kvstash does not do; the client changes the request.
//   500 io, bad_format, internal: the server's own disk, its own files (model, named states in
//       --state-dir, prefix-cache blocks) or a bug; the client cannot fix it by asking differently.
// Files a client sends (PUT /v1/states/NAME/file) are checked where they arrive, and a malformed one is
// answered 400 invalid_state_file there, before any error reaches this table.
int http_status(ErrorCode code);
// An output error of a full disk or quota (ENOSPC, EDQUOT: the library's message carries strerror's text).
bool is_disk_full(const Error& e);
// 503 preparation_timeout: a request's preparation ran past serve --prepare-timeout (PreparationExpired).
ApiError preparation_expired();
// An ApiError with http_status(e.code()) and the library's message; 507 for an output error of a full disk
// (ENOSPC, EDQUOT); preparation_expired() for a PreparationExpired.
ApiError api_error(const Error& e);
// For a library call on request data: a 400 naming `param` / `code` when http_status says the client can
// fix it, else api_error(e) (the server's fault keeps its 500, without the request's field; a deadline its 503).
ApiError request_error(const Error& e, std::string param, std::string code);

// The OpenAI error type for a status: invalid_request_error, authentication_error, not_found_error, ...
const char* error_type(int status);
// `message` with every word that contains a '/' (a file path: a model, a state file, a cache block) replaced by
// "<path>": what a 5xx tells the client, since the server's file layout is none of its business.
std::string without_paths(const std::string& message);
// {"error": {...}}; empty param / code become null. A 5xx message is shown without_paths (the full message
// goes to stderr).
nlohmann::json error_json(int status, const std::string& message, const std::string& param = {},
                          const std::string& code = {});
// JSON text for the wire: invalid UTF-8 (a token's bytes can be part of a character) is replaced by U+FFFD
// instead of throwing.
std::string dump_json(const nlohmann::json& value);

}  // namespace kvstash::server
