// Chat templates: turn a conversation into the exact text the model was trained on.
//
//   auto tmpl = kvstash::ChatTemplate::for_model(*model);           // from tokenizer.chat_template
//   std::string prompt = tmpl.render({{"system", "Be brief."}, {"user", "Hi!"}}, /*add_generation_prompt=*/true);
//   auto ids = model->tokenizer().encode(prompt, /*add_special=*/false, /*parse_special=*/true);
//
// Rendering is byte-identical to transformers' apply_chat_template for the supported templates, and
// prefix-stable: the rendering of turns 1..N (closed by the assistant's reply) is a prefix of the
// rendering of turns 1..N+1, so the state of earlier turns can be reused.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash {

class Model;

struct ChatMessage {
    std::string role;     // "system", "user" or "assistant"
    std::string content;
};

class ChatTemplate {
public:
    // Recognises the model's tokenizer.chat_template. Throws Error(unsupported) when there is none or
    // it is not one kvstash knows, with a message naming `--chat-template chatml|llama3|...` as the way out.
    static ChatTemplate for_model(const Model& model);
    // A template by name: "chatml", "llama3", ... (see names()). Throws Error(invalid_argument) for an unknown name.
    static ChatTemplate named(std::string_view name);
    static std::vector<std::string> names();

    const std::string& name() const { return name_; }
    // Throws Error(invalid_argument) for an unknown role.
    std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
    // Text that closes an assistant turn after the model's end-of-turn token was generated, so that
    // render(messages + reply) == render(messages, true) + reply + end_of_turn_suffix(). For ChatML
    // the model generates "<|im_end|>", and the template adds "\n" after it.
    std::string end_of_turn_suffix() const;

private:
    std::string name_;
    std::string default_system;  // used when the conversation has no system message (SmolLM2, Qwen2.5); may be empty
    int kind_ = 0;
};

}  // namespace kvstash
