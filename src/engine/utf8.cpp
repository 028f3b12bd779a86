#include "engine/utf8.h"

#include <cstdint>

namespace kvstash::utf8 {

namespace {

bool is_continuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

// Bytes in a character that starts with `lead`; 0 for a byte that cannot start a multi-byte one.
size_t sequence_length(uint8_t lead) {
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

// The second byte's range excludes overlong forms, surrogates and code points past U+10FFFF (RFC 3629).
bool second_byte_allowed(uint8_t lead, uint8_t second) {
    switch (lead) {
        case 0xE0: return second >= 0xA0 && second <= 0xBF;
        case 0xED: return second >= 0x80 && second <= 0x9F;
        case 0xF0: return second >= 0x90 && second <= 0xBF;
        case 0xF4: return second >= 0x80 && second <= 0x8F;
        default: return is_continuation(second);
    }
}

}  // namespace

size_t incomplete_tail_length(std::string_view text) {
    const size_t size = text.size();
    for (size_t back = 1; back <= 3 && back <= size; ++back) {
        const auto byte = static_cast<uint8_t>(text[size - back]);
        if (is_continuation(byte)) continue;
        const size_t need = sequence_length(byte);
        if (need <= back) return 0;  // ASCII, an invalid lead, or a character already complete
        if (back >= 2 && !second_byte_allowed(byte, static_cast<uint8_t>(text[size - back + 1]))) return 0;
        return back;
    }
    return 0;  // three continuation bytes (or fewer, with nothing before): complete or never valid
}

}  // namespace kvstash::utf8
