// kvstash::Error — the one exception type the library throws.
// Every message says what was wrong and, where there is one, what to do about it.
#pragma once

#include <stdexcept>
#include <string>

namespace kvstash {

enum class ErrorCode {
    invalid_argument,  // the caller passed a bad value (flag, size, position)
    io,                // a file could not be opened, read, mapped or written
    bad_format,        // a file's contents are malformed, truncated or hostile
    unsupported,       // well-formed but not something kvstash handles (tensor type, architecture)
    out_of_range,      // a position or length outside what the model/context allows
    internal,          // a broken internal invariant (a bug)
};

class Error : public std::runtime_error {
public:
    Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
    ErrorCode code() const noexcept { return code_; }

private:
    ErrorCode code_;
};

}  // namespace kvstash
