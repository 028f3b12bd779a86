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
    output,            // an output file could not be written: no space, no permission, a read-only or special
                       // target (the inputs were fine; the CLI exits 5, not 3)
};

class Error : public std::runtime_error {
public:
    Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
    ErrorCode code() const noexcept { return code_; }

private:
    ErrorCode code_;
};

}  // namespace kvstash
