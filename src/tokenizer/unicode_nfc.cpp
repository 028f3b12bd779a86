// NFC through utf8proc (Debian's libutf8proc), applied to each well-formed UTF-8 run of the input.
#include "tokenizer/unicode_nfc.h"

#include <utf8proc.h>

#include <cstdlib>

#include "base/utf8.h"
#include "kvstash/error.h"

namespace kvstash::tokenization {
namespace {

// Appends the NFC form of a well-formed UTF-8 run.
void append_nfc(std::string& out, std::string_view run) {
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()), static_cast<utf8proc_ssize_t>(run.size()),
                     &mapped, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) {
        std::free(mapped);
        throw Error(ErrorCode::internal, std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
    }
    out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
    std::free(mapped);
}

}  // namespace

std::string to_nfc(std::string_view text) {
    // Nothing below U+0300 (lead byte 0xCC) decomposes or composes.
    bool needs_work = false;
    for (char c : text) needs_work |= static_cast<unsigned char>(c) >= 0xCC;
    if (!needs_work) return std::string(text);

    std::string out;
    out.reserve(text.size());
    size_t run_start = 0, i = 0;
    while (i < text.size()) {
        const size_t len = utf8::sequence_length(text, i);
        if (len > 0) {
            i += len;
            continue;
        }
        // A malformed byte: normalise the run before it, copy the byte through, start a new run.
        append_nfc(out, text.substr(run_start, i - run_start));
        out.push_back(text[i]);
        run_start = ++i;
    }
    append_nfc(out, text.substr(run_start));
    return out;
}

}  // namespace kvstash::tokenization
