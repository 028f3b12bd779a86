// Chat templates: turn a conversation into the exact text the model was trained on.
//
//   auto tmpl = kvstash::ChatTemplate::for_model(*model);           // from tokenizer.chat_template
//   std::string prompt = tmpl.render({{"system", "Be brief."}, {"user", "Hi!"}}, kvstash::AddGenerationPrompt::yes);
//   auto ids = model->tokenizer().encode(prompt, kvstash::AddSpecial::no, kvstash::ParseSpecial::yes);
//
// Rendering is byte-identical to transformers' apply_chat_template for the supported templates, and
// prefix-stable: the rendering of turns 1..N (closed by the assistant's reply) is a prefix of the
// rendering of turns 1..N+1, so the state of earlier turns can be reused.
//
// The text is complete: it holds the template's own BOS where the template writes one (llama3:
// "<|begin_of_text|>") and its control tokens as text. Encode it with AddSpecial::no (AddSpecial::yes
// would add a second BOS to a llama3 prompt) and ParseSpecial::yes (so "<|im_start|>" is one token).
// Message content is inserted as is. To tokenize it, use render_prompt() and the Tokenizer::encode that takes
// its `content` ranges: control-token text a user wrote ("<|im_end|><|im_start|>system") then stays text,
// and only the template's own markup becomes control tokens (transformers, whose sanitize_control_tokens
// is off by default, would turn the user's text into control tokens too).
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvstash/tokenizer.h"

namespace kvstash {

class Model;

// render(): end with the header of an assistant turn for the model to complete (yes), or after the last
// message (no).
enum class AddGenerationPrompt : bool { no, yes };

// A function call an assistant message made (OpenAI's tool_calls[i]).
struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // JSON text of an object, as OpenAI sends it
};

struct ChatMessage {
    std::string role;  // "system", "user", "assistant"; "tool" (a call's result) where tool_call_format() != none
    std::string content;
    std::vector<ToolCall> tool_calls{};  // assistant only: the calls it made (content may then be empty)
    std::string tool_call_id{};          // tool only: the call this result answers (no template writes it)
};

// A rendered conversation: the text of render(), and where in it the messages' own text is (contents,
// tool definitions, call arguments, tool results; sorted, disjoint): everything the template did not write.
struct ChatPrompt {
    std::string text;
    std::vector<TextRange> content;

    void append_markup(std::string_view markup) { text.append(markup); }
    void append_content(std::string_view user_text) {
        if (user_text.empty()) return;
        if (!content.empty() && content.back().end == text.size()) {
            content.back().end += user_text.size();
        } else {
            content.push_back({text.size(), text.size() + user_text.size()});
        }
        text.append(user_text);
    }
};

// How a template's model writes tool calls (ChatTemplate::tool_call_format()).
//   none     the template defines no tools
//   qwen     Qwen 2.5: "<tool_call>\n{\"name\": NAME, \"arguments\": {...}}\n</tool_call>", one or more
//   llama3   Llama 3.1/3.2: the whole reply is {"name": NAME, "parameters": {...}}, one call
enum class ToolCallFormat { none, qwen, llama3 };

class ChatTemplate {
public:
    // Recognises the model's tokenizer.chat_template (the exact text of a known template; for ChatML, any
    // default system prompt is read from it). Throws Error(unsupported) when there is none or it is not one
    // kvstash knows, with a message listing the names named() takes (the CLI adds its --chat-template advice).
    static ChatTemplate for_model(const Model& model);
    // A template by name (see names()): "chatml" (no default system prompt), "llama3" (Llama 3.1/3.2: a
    // system header with the date always comes first), "llama3.0" (Llama 3: no default system header), "gemma"
    // (Gemma 3: <bos>, turns of user/model, a leading system message folded into the first user turn).
    // Throws Error(invalid_argument) for an unknown name.
    static ChatTemplate named(std::string_view name);
    static std::vector<std::string> names();

    const std::string& name() const;
    // Throws Error(invalid_argument) for an unknown role or an empty conversation (transformers refuses
    // that too). llama3 trims each message's content (Python str.strip()), as its template does.
    std::string render(std::span<const ChatMessage> messages, AddGenerationPrompt add_generation_prompt) const;
    // With tool definitions, as transformers' apply_chat_template(messages, tools=...): each of `tools` is
    // the JSON text of one tool object as the client sent it ({"type": "function", "function": {...}}),
    // written back as the template's `tojson` does (keys in the given order). Messages may then hold
    // tool_calls (their arguments are parsed and written as JSON, as llama.cpp's server does) and tool
    // results. Throws Error(unsupported) when tool_call_format() is none and tools or tool messages are
    // given, Error(invalid_argument) where the template raises (Llama 3.1: more than one call in a
    // message, tools without a user message).
    std::string render(std::span<const ChatMessage> messages, std::span<const std::string> tools,
                       AddGenerationPrompt add_generation_prompt) const;
    // The same text (with or without tools), with the ranges the messages' text fills.
    ChatPrompt render_prompt(std::span<const ChatMessage> messages, std::span<const std::string> tools,
                             AddGenerationPrompt add_generation_prompt) const;
    ToolCallFormat tool_call_format() const;
    void set_tool_call_format(ToolCallFormat format);
    // The same for a braced list, as in the example above (a std::span cannot be built from one in C++20).
    std::string render(std::initializer_list<ChatMessage> messages, AddGenerationPrompt add_generation_prompt) const {
        return render(std::span<const ChatMessage>(messages.begin(), messages.size()), add_generation_prompt);
    }
    // Text that closes an assistant turn after the model's end-of-turn token was generated, so that
    // render(messages + {assistant, reply}) == render(messages, true) + generated + end_of_turn_suffix(),
    // where generated = reply + the end-of-turn token's text. For ChatML the model generates
    // "<|im_end|>", and the template adds "\n" after it; llama3 adds nothing after "<|eot_id|>".
    std::string end_of_turn_suffix() const;

    // llama3 only: the date of the system header's "Today Date: " line. The default, "26 Jul 2024", is the
    // date Llama 3.1's template writes. Llama 3.2's template (and transformers rendering it) writes the
    // day it runs (strftime_now("%d %b %Y"), e.g. "05 Mar 2025"); kvstash keeps the fixed date unless told
    // otherwise, so that a prompt, and the state saved for it, stays the same from one day to the next.
    void set_date_string(std::string date_string);

    // chatml only: a system turn with this text is inserted when the first message is not a system message,
    // as SmolLM2's and Qwen2.5's templates do; for_model() sets it from the model's template.
    void set_default_system_prompt(std::string system_prompt);

    ChatTemplate(const ChatTemplate& other);
    ChatTemplate& operator=(const ChatTemplate& other);
    ChatTemplate(ChatTemplate&&) noexcept;
    ChatTemplate& operator=(ChatTemplate&&) noexcept;
    ~ChatTemplate();

    struct Impl;  // which template and its settings (src/text/chat_template_impl.h)

private:
    ChatTemplate();
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash
