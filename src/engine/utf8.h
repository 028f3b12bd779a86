// UTF-8 helpers for streaming text whose bytes arrive token by token (a token may end inside a
// character).
#pragma once

#include <cstddef>
#include <string_view>

namespace kvstash::utf8 {

// How many bytes (0..3) at the end of `text` are the start of a character still missing bytes: a lead
// byte followed by fewer continuation bytes than it announces, each allowed at its place (so the
// sequence can still become a valid character). Bytes that can never complete one (a stray
// continuation byte, 0xC0, 0xC1, 0xF5..0xFF, a lead followed by a byte it does not allow) count as
// complete: holding them back would not help.
size_t incomplete_tail_length(std::string_view text);

}  // namespace kvstash::utf8
