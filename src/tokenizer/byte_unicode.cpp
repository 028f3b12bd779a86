#include "tokenizer/byte_unicode.h"

#include <array>

namespace kvstash::tokenization {
namespace {

bool stands_for_itself(unsigned byte) {
    return (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
}

constexpr uint32_t kRemapped = 68;  // bytes that do not stand for themselves

struct Alphabet {
    std::array<uint32_t, 256> code_point{};
    std::array<std::string, 256> spelled;
    std::array<uint8_t, kRemapped> remapped_byte{};  // U+0100 + i stands for remapped_byte[i]
    Alphabet() {
        uint32_t next = 0x100;
        for (unsigned byte = 0; byte < 256; ++byte) {
            if (stands_for_itself(byte)) {
                code_point[byte] = byte;
            } else {
                remapped_byte[next - 0x100] = static_cast<uint8_t>(byte);
                code_point[byte] = next++;
            }
            append_utf8(spelled[byte], code_point[byte]);
        }
    }
};

const Alphabet& alphabet() {
    static const Alphabet instance;
    return instance;
}

}  // namespace

size_t utf8_sequence_length(std::string_view text, size_t pos) {
    const size_t left = text.size() - pos;
    const auto at = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
    const auto continuation = [&](size_t i) { return (at(i) & 0xC0) == 0x80; };
    const uint8_t lead = at(0);
    if (lead < 0x80) return 1;
    if (lead < 0xC2) return 0;  // continuation byte, or overlong 2-byte lead
    if (lead < 0xE0) return left >= 2 && continuation(1) ? 2 : 0;
    if (lead < 0xF0) {
        if (left < 3 || !continuation(1) || !continuation(2)) return 0;
        if (lead == 0xE0 && at(1) < 0xA0) return 0;   // overlong
        if (lead == 0xED && at(1) >= 0xA0) return 0;  // UTF-16 surrogate
        return 3;
    }
    if (lead < 0xF5) {
        if (left < 4 || !continuation(1) || !continuation(2) || !continuation(3)) return 0;
        if (lead == 0xF0 && at(1) < 0x90) return 0;   // overlong
        if (lead == 0xF4 && at(1) >= 0x90) return 0;  // beyond U+10FFFF
        return 4;
    }
    return 0;
}

uint32_t decode_utf8(std::string_view text, size_t pos, size_t length) {
    const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(text[pos + i])); };
    switch (length) {
        case 1: return byte(0);
        case 2: return ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
        case 3: return ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
        default:
            return ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) | (byte(3) & 0x3F);
    }
}

void append_utf8(std::string& out, uint32_t cp) {
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

uint32_t byte_to_code_point(uint8_t byte) { return alphabet().code_point[byte]; }

int code_point_to_byte(uint32_t cp) {
    if (cp < 256) return stands_for_itself(cp) ? static_cast<int>(cp) : -1;
    if (cp >= 0x100 + kRemapped) return -1;
    return alphabet().remapped_byte[cp - 0x100];
}

std::string to_byte_level(std::string_view bytes) {
    const Alphabet& a = alphabet();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) out += a.spelled[static_cast<uint8_t>(c)];
    return out;
}

std::string from_byte_level(std::string_view spelled) {
    std::string out;
    out.reserve(spelled.size());
    size_t pos = 0;
    while (pos < spelled.size()) {
        const size_t len = utf8_sequence_length(spelled, pos);
        if (len == 0) {
            out += spelled[pos++];
            continue;
        }
        const int byte = code_point_to_byte(decode_utf8(spelled, pos, len));
        if (byte >= 0) {
            out += static_cast<char>(byte);
        } else {
            out.append(spelled.substr(pos, len));
        }
        pos += len;
    }
    return out;
}

}  // namespace kvstash::tokenization
