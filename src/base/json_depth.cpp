#include "base/json_depth.h"

#include <cstdint>
#include <string>

namespace kvstash::json_depth {

size_t nesting_depth(std::string_view text, size_t stop_after) {
    size_t depth = 0, deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') {
                ++i;  // the escaped character, whatever it is
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest) {
                deepest = depth;
                if (deepest > stop_after) return deepest;
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

void require_depth_at_most(std::string_view text, std::string_view what, ErrorCode code, size_t max_depth) {
    if (nesting_depth(text, max_depth) > max_depth) {
        throw Error(code, std::string(what) + " nests arrays/objects deeper than " + std::to_string(max_depth) +
                              " levels (the limit on JSON nesting); flatten it");
    }
}

}  // namespace kvstash::json_depth
