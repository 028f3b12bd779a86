#include "tokenizer/byte_unicode.h"

#include <array>

#include "base/utf8.h"

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
            utf8::append(spelled[byte], code_point[byte]);
        }
    }
};

const Alphabet& alphabet() {
    static const Alphabet instance;
    return instance;
}

}  // namespace

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
        char32_t code_point = 0;
        const size_t len = utf8::decode(spelled, pos, &code_point);
        if (len == 0) {
            out += spelled[pos++];
            continue;
        }
        const int byte = code_point_to_byte(code_point);
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
