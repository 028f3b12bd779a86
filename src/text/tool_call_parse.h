// Reading tool calls out of a model's reply (kvstash/chat.h ToolCallFormat):
//   qwen     every "<tool_call>{json}</tool_call>" block (whitespace around the JSON allowed), the JSON
//            {"name": N, "arguments": {...}}; the content is the text before the first block, right-trimmed
//   llama3   the whole reply (trimmed) is {"name": N, "parameters": {...}} ("arguments" accepted too)
// Each call's arguments come back as compact JSON text (OpenAI's `arguments` string), ids empty. A reply
// that does not hold well-formed calls (cut short by max_tokens, or no call at all) gives no calls and the
// whole text as content.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvstash/chat.h"

namespace kvstash {

struct ParsedToolCalls {
    std::string content;
    std::vector<ToolCall> calls;
};

ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text);

// How many bytes at the start of `text` (a reply still being generated) are content for certain: not a
// call nor the start of one. Streaming sends those and holds back the rest until the reply ends.
size_t tool_call_free_prefix(ToolCallFormat format, std::string_view text);

}  // namespace kvstash
