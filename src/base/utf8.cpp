#include "base/utf8.h"

namespace kvstash::utf8 {

namespace {

// Bytes in a character that starts with `lead`; 0 for a byte that cannot start a multi-byte one.
size_t multi_byte_length(uint8_t lead) {
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

// The second byte's range excludes overlong forms, surrogates and code points past U+10FFFF (table 3-7).
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

size_t sequence_length(std::string_view text, size_t pos) {
    const auto lead = static_cast<uint8_t>(text[pos]);
    if (lead < 0x80) return 1;
    const size_t length = multi_byte_length(lead);
    if (length == 0 || text.size() - pos < length) return 0;
    if (!second_byte_allowed(lead, static_cast<uint8_t>(text[pos + 1]))) return 0;
    for (size_t k = 2; k < length; ++k) {
        if (!is_continuation(text[pos + k])) return 0;
    }
    return length;
}

size_t decode(std::string_view text, size_t pos, char32_t* code_point) {
    const size_t length = sequence_length(text, pos);
    if (length == 0) return 0;
    const auto byte = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(text[pos + k])); };
    // The lead byte keeps 7, 5, 4 or 3 payload bits; each continuation byte 6.
    static constexpr char32_t kLeadMask[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    char32_t c = byte(0) & kLeadMask[length];
    for (size_t k = 1; k < length; ++k) c = (c << 6) | (byte(k) & 0x3F);
    *code_point = c;
    return length;
}

void append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

size_t valid_prefix_length(std::string_view text) {
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t length = sequence_length(text, pos);
        if (length == 0) return pos;
        pos += length;
    }
    return pos;
}

size_t incomplete_tail_length(std::string_view text) {
    const size_t size = text.size();
    for (size_t back = 1; back <= 3 && back <= size; ++back) {
        const auto byte = static_cast<uint8_t>(text[size - back]);
        if (is_continuation(byte)) continue;
        const size_t need = multi_byte_length(byte);
        if (need <= back) return 0;  // ASCII, an invalid lead, or a character already complete
        if (back >= 2 && !second_byte_allowed(byte, static_cast<uint8_t>(text[size - back + 1]))) return 0;
        return back;
    }
    return 0;  // three continuation bytes (or fewer, with nothing before): complete or never valid
}

size_t character_start_at_or_before(std::string_view text, size_t pos) {
    while (pos > 0 && pos < text.size() && is_continuation(text[pos])) --pos;
    return pos;
}

}  // namespace kvstash::utf8
