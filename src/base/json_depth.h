// Nesting depth of JSON text, measured before it is parsed: nlohmann's dump, copy and comparison
// recurse once per level, and so do our walkers over parsed documents (JSON Schema -> GBNF, tool
// rendering), so a document nested 100k deep would overflow the stack after a successful parse.
// Every JSON that comes from a user or a file is checked here first (docs/deploy.md, "Limits").
#pragma once

#include <cstddef>
#include <string_view>

#include "kvstash/error.h"

namespace kvstash::json_depth {

// Levels of [ ] and { } nesting that any JSON we parse may have (a request body, a schema, a model's
// config.json). Real documents stay far below it: OpenAI caps JSON Schema nesting at 10 (structured output).
inline constexpr size_t kMaxJsonDepth = 256;

// The deepest nesting of [ and { in `text`, brackets inside strings not counted. Not a validator: any
// text gets a number, malformed JSON is the parser's to report. Stops counting past `stop_after`.
size_t nesting_depth(std::string_view text, size_t stop_after = SIZE_MAX);

// Throws Error(code) "<what> nests arrays/objects deeper than 256 levels ..." when `text` does
// (invalid_argument for text a user sent, bad_format for a file).
void require_depth_at_most(std::string_view text, std::string_view what, ErrorCode code = ErrorCode::invalid_argument,
                           size_t max_depth = kMaxJsonDepth);

}  // namespace kvstash::json_depth
