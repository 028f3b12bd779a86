// The chat templates kvstash recognises in a model, verbatim. Rendering them is hand-written
// (chat_template.cpp); recognising them by their exact text is what makes "byte-identical to transformers"
// a claim about the model's own template rather than about one that merely looks alike.
#pragma once

#include <span>
#include <string_view>

#include "kvstash/chat.h"

namespace kvstash {

// Stands for the default system prompt in a known text (SmolLM2, Qwen2, Qwen2.5 write theirs into the template):
// any prompt matches there, the same at every occurrence, and becomes the ChatTemplate's default system prompt.
inline constexpr std::string_view kDefaultSystemMarker = "@DEFAULT_SYSTEM@";

struct KnownChatTemplate {
    std::string_view name;  // the ChatTemplate::named() template it renders like
    std::string_view text;  // the Jinja text; kDefaultSystemMarker where a default system prompt goes
    ToolCallFormat tools = ToolCallFormat::none;  // how the template writes tools and calls
};

std::span<const KnownChatTemplate> known_chat_templates();

}  // namespace kvstash
