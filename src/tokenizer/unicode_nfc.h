// Unicode Normalization Form C (UAX #15), the normalizer Qwen2's tokenizer.json runs before its
// pre-tokenizer (HF normalizers.NFC). Computed by utf8proc (libutf8proc, Unicode 15 in Debian 12).
#pragma once

#include <string>
#include <string_view>

namespace kvstash::tokenization {

// `text` in NFC: canonical decomposition, canonical ordering of combining marks, then canonical
// composition (Hangul algorithmically). Bytes that are not well-formed UTF-8 are copied through as
// they are and block composition across them, so any input is accepted. Returns `text` unchanged
// (cheaply) when it has no code point at or above U+0300, which covers ASCII and Latin-1.
std::string to_nfc(std::string_view text);

}  // namespace kvstash::tokenization
