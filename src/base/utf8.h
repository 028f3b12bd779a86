// UTF-8 (RFC 3629 / Unicode 15 §3.9, table 3-7): the one decoder, encoder and validator of the library.
//
// A well-formed sequence is 1-4 bytes: no overlong forms, no UTF-16 surrogates (U+D800..U+DFFF), nothing
// past U+10FFFF. Everything else (a stray continuation byte, 0xC0, 0xC1, 0xF5..0xFF, a lead byte followed
// by a byte it does not allow, a sequence cut short by the end of the text) is malformed: length 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvstash::utf8 {

// A byte 10xxxxxx: never the first byte of a character.
inline bool is_continuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }
inline bool is_continuation(char byte) { return is_continuation(static_cast<uint8_t>(byte)); }

// Length in bytes (1-4) of the well-formed sequence starting at text[pos], or 0 when the bytes there are
// not one. `pos` < text.size().
size_t sequence_length(std::string_view text, size_t pos);

// Decodes the well-formed sequence at text[pos] into *code_point and returns its length (1-4); returns 0
// and leaves *code_point alone when the bytes there are malformed. `pos` < text.size().
size_t decode(std::string_view text, size_t pos, char32_t* code_point);

// Appends the UTF-8 encoding of `code_point` (<= U+10FFFF; a surrogate is encoded as its 3 bytes).
void append(std::string& out, char32_t code_point);

// Bytes from the start of `text` that are whole well-formed sequences: text.size() when all of it is
// valid UTF-8, otherwise the offset of the first malformed byte.
size_t valid_prefix_length(std::string_view text);
inline bool is_valid(std::string_view text) { return valid_prefix_length(text) == text.size(); }

// For text whose bytes arrive token by token (a token may end inside a character): how many bytes (0..3)
// at the end of `text` are the start of a character still missing bytes — a lead byte followed by fewer
// continuation bytes than it announces, each allowed at its place (so the sequence can still become a
// valid character). Bytes that can never complete one count as complete: holding them back would not help.
size_t incomplete_tail_length(std::string_view text);

// The largest p <= pos at which a character starts: pos moved back over continuation bytes (at most to
// 0). Cutting text at p never splits a well-formed character. `pos` <= text.size() (text.size() is a start).
size_t character_start_at_or_before(std::string_view text, size_t pos);

}  // namespace kvstash::utf8
