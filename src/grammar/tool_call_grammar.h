// The GBNF of a model's tool-call text (kvstash/chat.h ToolCallFormat), each call's arguments following
// its tool's JSON Schema: one JSON Schema -> GBNF conversion per tool, with the tool's rules renamed
// (prefix "tN-") so that several schemas live in one grammar; the shared primitive rules (string,
// number, space, ...) are the same text in every conversion and are kept once.
//
//   qwen     root ::= call ("\n" call)*      call ::= "<tool_call>\n{\"name\": \"" (N0 "\", \"arguments\": " t0-root
//            | ...) "}\n</tool_call>"         (one call only without `parallel`)
//   llama3   root ::= "{\"name\": \"" (N0 "\", \"parameters\": " t0-root | ...) "}"
#pragma once

#include <span>
#include <string>

#include "kvstash/chat.h"
#include "kvstash/grammar.h"

namespace kvstash::grammar {

// Throws Error(invalid_argument / unsupported) as json_schema_to_gbnf does, the message naming the tool.
std::string tool_call_gbnf(ToolCallFormat format, std::span<const ToolSchema> tools, bool parallel,
                           const GrammarLimits& limits = {});

// `prefix` + name for every rule of `gbnf` (as json_schema_to_gbnf writes it: one rule per line) but the
// shared primitive rules; references renamed alike.
std::string prefix_rules(const std::string& gbnf, const std::string& prefix);

}  // namespace kvstash::grammar
