#include "text/python_strip.h"

#include "base/utf8.h"

namespace kvstash {
namespace {

// Python's str.isspace(), what Jinja's trim filter (str.strip()) removes: the code points of bidirectional type
// WS, B or S or category Zs (this list is Python 3.11's, all code points checked). Not U+200B, U+FEFF, U+180E.
bool is_python_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

std::string_view python_strip(std::string_view s) {
    char32_t c;
    while (!s.empty()) {
        const size_t n = utf8::decode(s, 0, &c);
        if (n == 0 || !is_python_space(c)) break;
        s.remove_prefix(n);
    }
    while (!s.empty()) {
        size_t start = s.size() - 1;  // the last code point starts at most 3 continuation bytes back
        while (start > 0 && s.size() - start < 4 && utf8::is_continuation(s[start])) --start;
        const size_t n = utf8::decode(s, start, &c);  // malformed bytes (0) are never whitespace
        if (n != s.size() - start || !is_python_space(c)) break;
        s.remove_suffix(n);
    }
    return s;
}

}  // namespace kvstash
