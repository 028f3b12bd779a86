#include "server/api_error.h"

#include <cstdio>

#include "kvstash/grammar.h"

namespace kvstash::server {

namespace {

bool ends_token(char c) { return c == ' ' || c == '\'' || c == '"' || c == '(' || c == ')' || c == ',' || c == '\n'; }

}  // namespace

std::string without_paths(const std::string& message) {
    std::string out;
    for (size_t i = 0; i < message.size();) {
        if (ends_token(message[i])) {
            out += message[i++];
            continue;
        }
        size_t end = i;
        while (end < message.size() && !ends_token(message[end])) ++end;
        const std::string_view token(message.data() + i, end - i);
        if (token.find('/') != std::string_view::npos) {
            // A trailing ':' or '.' is punctuation of the message, not part of the path.
            const size_t keep = token.find_last_not_of(":.;") + 1;
            out += "<path>";
            out += token.substr(keep);
        } else {
            out += token;
        }
        i = end;
    }
    return out;
}

int http_status(ErrorCode code) {
    switch (code) {
        case ErrorCode::invalid_argument:
        case ErrorCode::out_of_range:
        case ErrorCode::unsupported: return 400;
        case ErrorCode::io:
        case ErrorCode::bad_format:
        case ErrorCode::internal:
        case ErrorCode::output: return 500;
    }
    return 500;
}

bool is_disk_full(const Error& e) {
    const std::string_view message = e.what();
    return e.code() == ErrorCode::output && (message.find("No space left on device") != std::string_view::npos ||
                                             message.find("Disk quota exceeded") != std::string_view::npos);
}

ApiError preparation_expired() {
    return ApiError(503,
                    "preparing the request (compiling its grammar or JSON Schema, tokenizing its prompt) took longer "
                    "than this server allows (serve --prepare-timeout); simplify the schema or grammar, or ask the "
                    "operator for a longer --prepare-timeout",
                    "", "preparation_timeout");
}

ApiError api_error(const Error& e) {
    if (dynamic_cast<const PreparationExpired*>(&e)) return preparation_expired();
    const std::string message = e.what();
    // A full disk is the operator's to fix, but the client should know it is not a bug: 507 (RFC 4918).
    if (is_disk_full(e)) {
        return ApiError(507,
                        "the server's disk is full: " + message +
                            " (delete named states, or give the server more space or a smaller --cache-disk)",
                        "", "insufficient_storage");
    }
    return ApiError(http_status(e.code()), message);
}

ApiError request_error(const Error& e, std::string param, std::string code) {
    if (http_status(e.code()) != 400 || dynamic_cast<const PreparationExpired*>(&e)) return api_error(e);
    return bad_request(e.what(), std::move(param), std::move(code));
}

const char* error_type(int status) {
    switch (status) {
        case 401: return "authentication_error";
        case 404: return "not_found_error";
        case 413: return "request_too_large";
        case 503: return "server_overloaded";
        default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

nlohmann::json error_json(int status, const std::string& message, const std::string& param, const std::string& code) {
    std::string shown = message;
    if (status >= 500) {
        shown = without_paths(message);
        // The operator's log keeps what the client is not shown.
        if (shown != message) std::fprintf(stderr, "kvstash serve: HTTP %d: %s\n", status, message.c_str());
    }
    nlohmann::json error = {{"message", shown}, {"type", error_type(status)}, {"param", nullptr}, {"code", nullptr}};
    if (!param.empty()) error["param"] = param;
    if (!code.empty()) error["code"] = code;
    return {{"error", error}};
}

std::string dump_json(const nlohmann::json& value) {
    return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvstash::server
