// Chat templates rendered by hand, byte-identical to transformers' Jinja rendering of the templates in
// text/chat_template_known.h for conversations of system/user/assistant messages without tools.
//
//   chatml    [<|im_start|>system\n{default system}<|im_end|>\n]   when the first message is not a system one
//             <|im_start|>{role}\n{content}<|im_end|>\n           per message, content as is
//             <|im_start|>assistant\n                             generation prompt
//   llama3    <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n
//             Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n{first system message, trimmed}<|eot_id|>
//             <|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>   per other message
//             <|start_header_id|>assistant<|end_header_id|>\n\n                           generation prompt
//   llama3.0  as llama3 without the system header: <|begin_of_text|> then every message, system included.
//   gemma     <bos>, then per message after a leading system one (user first, then alternating; assistant -> model)
//             <start_of_turn>{role}\n[{leading system content, not trimmed}\n\n  first turn only]{content, trimmed}
//             <end_of_turn>\n;  <start_of_turn>model\n   generation prompt
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "model/model_access.h"
#include "text/chat_template_detect.h"
#include "text/chat_template_impl.h"
#include "text/python_strip.h"

namespace kvstash {
namespace {

std::string choices() {
    std::string out;
    for (const std::string& name : ChatTemplate::names()) out += (out.empty() ? "" : "|") + name;
    return out;
}

// The template the instruction-tuned models of an architecture's family use ("" when kvstash has no
// single answer): the advice when a base model has none.
std::string family_chat_template(const std::string& architecture) {
    if (architecture == "gemma3") return "gemma";
    if (architecture == "qwen2") return "chatml";
    return "";
}

void append_chatml_turn(ChatPrompt& out, std::string_view role, std::string_view content) {
    out.append_markup("<|im_start|>");
    out.append_markup(role);
    out.append_markup("\n");
    out.append_content(content);
    out.append_markup("<|im_end|>\n");
}

void append_llama3_header(ChatPrompt& out, std::string_view role) {
    out.append_markup("<|start_header_id|>");
    out.append_markup(role);
    out.append_markup("<|end_header_id|>\n\n");
}

ChatPrompt render_gemma(std::span<const ChatMessage> messages, AddGenerationPrompt add_generation_prompt) {
    ChatPrompt out;
    out.append_markup("<bos>");
    // A leading system message is no turn of its own: its text, untrimmed, opens the first turn.
    std::string first_turn_prefix;
    const size_t skipped = messages.front().role == "system" ? 1 : 0;
    if (skipped == 1) first_turn_prefix = messages.front().content + "\n\n";
    messages = messages.subspan(skipped);
    for (size_t i = 0; i < messages.size(); ++i) {
        // The template's check, exactly: even positions are user turns, odd ones are not (so a later system
        // message in an odd position passes and is written with its own role).
        if ((messages[i].role == "user") != (i % 2 == 0)) {
            throw Error(ErrorCode::invalid_argument,
                        "Gemma's chat template needs the roles to alternate user/assistant/user/assistant/... after an "
                        "optional leading system message; message " +
                            std::to_string(i + skipped) + " has the role \"" + messages[i].role + "\"");
        }
        out.append_markup("<start_of_turn>");
        out.append_markup(messages[i].role == "assistant" ? "model" : messages[i].role);
        out.append_markup("\n");
        if (i == 0) out.append_content(first_turn_prefix);
        out.append_content(python_strip(messages[i].content));
        out.append_markup("<end_of_turn>\n");
    }
    if (add_generation_prompt == AddGenerationPrompt::yes) out.append_markup("<start_of_turn>model\n");
    return out;
}

}  // namespace

ChatTemplate ChatTemplate::for_model(const Model& model) {
    const std::optional<std::string> text = ModelAccess::impl(model).file->get_string("tokenizer.chat_template");
    if (!text) {
        // Base (pretrained) checkpoints ship without a template (Gemma 3 270M's GGUF does): say so, and name
        // the format their family's instruction-tuned models use rather than guessing it silently.
        const std::string family = family_chat_template(model.info().architecture);
        throw Error(ErrorCode::unsupported,
                    "the model '" + model.info().name + "' has no chat template (no tokenizer.chat_template in " +
                        model.path() +
                        "): it is likely a base (pretrained) model rather than a chat model; continue text without "
                        "a template (generate -p), or use one of the templates kvstash renders by name: " +
                        choices() +
                        (family.empty() ? std::string()
                                        : " (its family's chat models use '" + family +
                                              "'; a base model follows it only loosely)"));
    }
    return detect_chat_template(*text);
}

ChatTemplate ChatTemplate::named(std::string_view name) {
    ChatTemplate tmpl;
    if (name == "chatml") {
        tmpl.impl_->kind = Impl::Kind::chatml;
    } else if (name == "llama3") {
        tmpl.impl_->kind = Impl::Kind::llama3;
        tmpl.impl_->tool_call_format = ToolCallFormat::llama3;
    } else if (name == "llama3.0") {
        tmpl.impl_->kind = Impl::Kind::llama3_0;
    } else if (name == "gemma") {
        tmpl.impl_->kind = Impl::Kind::gemma;
    } else {
        std::string known;
        for (const std::string& n : names()) known += (known.empty() ? "" : ", ") + n;
        throw Error(ErrorCode::invalid_argument,
                    "unknown chat template \"" + std::string(name) + "\"; the known ones are " + known);
    }
    tmpl.impl_->name = std::string(name);
    return tmpl;
}

std::vector<std::string> ChatTemplate::names() { return {"chatml", "llama3", "llama3.0", "gemma"}; }

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 AddGenerationPrompt add_generation_prompt) const {
    return render_prompt(messages, {}, add_generation_prompt).text;
}

ChatPrompt ChatTemplate::Impl::render_plain(std::span<const ChatMessage> messages,
                                            AddGenerationPrompt add_generation_prompt) const {
    for (size_t i = 0; i < messages.size(); ++i) {
        const std::string& role = messages[i].role;
        if (role != "system" && role != "user" && role != "assistant") {
            throw Error(ErrorCode::invalid_argument, "message " + std::to_string(i) + " has the role \"" + role +
                                                         "\"; a chat message's role is system, user or assistant");
        }
    }
    ChatPrompt out;
    if (kind == Kind::chatml) {
        if (has_default_system && messages.front().role != "system") {
            append_chatml_turn(out, "system", default_system);
        }
        for (const ChatMessage& message : messages) append_chatml_turn(out, message.role, message.content);
        if (add_generation_prompt == AddGenerationPrompt::yes) out.append_markup("<|im_start|>assistant\n");
        return out;
    }
    if (kind == Kind::gemma) return render_gemma(messages, add_generation_prompt);
    out.append_markup("<|begin_of_text|>");
    size_t first = 0;
    if (kind == Kind::llama3) {
        // Llama 3.1/3.2 always open with a system header; a leading system message goes into it.
        std::string_view system;
        if (messages.front().role == "system") {
            system = python_strip(messages.front().content);
            first = 1;
        }
        append_llama3_header(out, "system");
        out.append_markup("Cutting Knowledge Date: December 2023\nToday Date: ");
        out.append_markup(date_string);
        out.append_markup("\n\n");
        out.append_content(system);
        out.append_markup("<|eot_id|>");
    }
    for (size_t i = first; i < messages.size(); ++i) {
        append_llama3_header(out, messages[i].role);
        out.append_content(python_strip(messages[i].content));
        out.append_markup("<|eot_id|>");
    }
    if (add_generation_prompt == AddGenerationPrompt::yes) append_llama3_header(out, "assistant");
    return out;
}

std::string ChatTemplate::end_of_turn_suffix() const {
    return impl_->kind == Impl::Kind::chatml || impl_->kind == Impl::Kind::gemma ? "\n" : "";
}

ChatTemplate::ChatTemplate() : impl_(std::make_unique<Impl>()) {}
ChatTemplate::ChatTemplate(const ChatTemplate& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
ChatTemplate& ChatTemplate::operator=(const ChatTemplate& other) {
    if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
    return *this;
}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

const std::string& ChatTemplate::name() const { return impl_->name; }
ToolCallFormat ChatTemplate::tool_call_format() const { return impl_->tool_call_format; }
void ChatTemplate::set_tool_call_format(ToolCallFormat format) { impl_->tool_call_format = format; }
void ChatTemplate::set_date_string(std::string date_string) { impl_->date_string = std::move(date_string); }
void ChatTemplate::set_default_system_prompt(std::string system_prompt) {
    impl_->has_default_system = true;
    impl_->default_system = std::move(system_prompt);
}

}  // namespace kvstash
