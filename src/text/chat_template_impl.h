// What a ChatTemplate (kvstash/chat.h) is: which of the known templates it renders and its settings.
// The text layer's own: chat_template.cpp (plain conversations) and chat_template_tools.cpp (with tools).
#pragma once

#include <span>
#include <string>

#include "kvstash/chat.h"

namespace kvstash {

struct ChatTemplate::Impl {
    enum class Kind { chatml, llama3, llama3_0, gemma };

    std::string name;
    Kind kind = Kind::chatml;
    // chatml: see set_default_system_prompt
    bool has_default_system = false;
    std::string default_system;
    std::string date_string = "26 Jul 2024";  // llama3
    ToolCallFormat tool_call_format = ToolCallFormat::none;

    // A conversation of system/user/assistant messages without tools (chat_template.cpp).
    ChatPrompt render_plain(std::span<const ChatMessage> messages, AddGenerationPrompt add_generation_prompt) const;
};

}  // namespace kvstash
