// GPT-2's byte-level alphabet (UTF-8 itself: base/utf8.h).
//
// Byte-level BPE vocabularies (GPT-2, Llama 3, Qwen2, SmolLM2) spell every token as a string of
// code points, one per byte, so that the 256 byte values are printable characters: bytes 0x21-0x7E,
// 0xA1-0xAC and 0xAE-0xFF stand for themselves; the other 68 bytes (controls, space, 0x7F-0xA0,
// 0xAD) take U+0100.. in byte order (space -> U+0120 'Ġ', newline -> U+010A 'Ċ').
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvstash::tokenization {

uint32_t byte_to_code_point(uint8_t byte);
// The byte a code point of the alphabet stands for, or -1 when it is not in the alphabet.
int code_point_to_byte(uint32_t code_point);

// Bytes -> their byte-level spelling (UTF-8 of one alphabet code point per byte).
std::string to_byte_level(std::string_view bytes);
// Byte-level spelling -> bytes. Code points outside the alphabet (and malformed UTF-8) are copied
// through unchanged, so a token that was never byte-level spelled decodes to its own text.
std::string from_byte_level(std::string_view spelled);

}  // namespace kvstash::tokenization
