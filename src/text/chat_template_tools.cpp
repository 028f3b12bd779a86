// ChatTemplate::render with tools (kvstash/chat.h): Qwen 2.5's and Llama 3.1/3.2's templates with their
// tool branches, byte-identical to transformers' apply_chat_template(messages, tools=...) (the fixture
// tests/fixtures/chat/tools.json, made by tests/reference/make_tool_template_fixture.py).
//
//   qwen     <|im_start|>system\n{first system message, or the default}\n\n# Tools\n\n...<tools>
//            \n{tool | tojson} per tool \n</tools>\n\n...</tool_call><|im_end|>\n      (with tools)
//            per message: user/system/assistant turns as ChatML; an assistant turn with calls:
//            <|im_start|>assistant[\n{content}]\n<tool_call>\n{"name": "N", "arguments": {args}}\n</tool_call>...
//            <|im_end|>\n; consecutive tool results share one user turn of <tool_response> blocks.
//   llama3   the system header gets "Environment: ipython\n" (with tools); the tools (tojson, indent 4) go into
//            the first message after the system one with the template's instructions; a call is the whole
//            assistant turn {"name": "N", "parameters": {args}}; a tool result is an `ipython` turn whose
//            content is written as a JSON string (the template's `content is iterable` holds for a string).
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/json_depth.h"
#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "text/chat_template_impl.h"
#include "text/python_json.h"
#include "text/python_strip.h"

namespace kvstash {
namespace {

using nlohmann::ordered_json;

ordered_json parse_json(const std::string& text, const std::string& what) {
    json_depth::require_depth_at_most(text, what);
    try {
        return ordered_json::parse(text);
    } catch (const nlohmann::json::exception&) {
        throw Error(ErrorCode::invalid_argument, what + " is not valid JSON: " + text.substr(0, 80));
    }
}

std::string arguments_json(const ToolCall& call) {
    return python_json_dumps(parse_json(call.arguments, "the arguments of tool call '" + call.name + "'"));
}

void check_roles(std::span<const ChatMessage> messages) {
    for (size_t i = 0; i < messages.size(); ++i) {
        const std::string& role = messages[i].role;
        if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
            throw Error(ErrorCode::invalid_argument, "message " + std::to_string(i) + " has the role \"" + role +
                                                         "\"; use system, user, assistant or tool");
        }
        if (!messages[i].tool_calls.empty() && role != "assistant") {
            throw Error(ErrorCode::invalid_argument,
                        "message " + std::to_string(i) + " has tool_calls but is not an assistant message");
        }
    }
}

void append_llama3_header(ChatPrompt& out, std::string_view role) {
    out.append_markup("<|start_header_id|>");
    out.append_markup(role);
    out.append_markup("<|end_header_id|>\n\n");
}

ChatPrompt render_qwen_tools(const ChatTemplate::Impl& t, std::span<const ChatMessage> messages,
                             std::span<const std::string> tools, AddGenerationPrompt add_generation_prompt) {
    ChatPrompt out;
    out.append_markup("<|im_start|>system\n");
    const bool leading_system = messages.front().role == "system";
    if (leading_system) {
        out.append_content(messages.front().content);
    } else {
        out.append_markup(t.default_system);
    }
    if (!tools.empty()) {
        out.append_markup(
            "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
            "with function signatures within <tools></tools> XML tags:\n<tools>");
        for (const std::string& tool : tools) {
            out.append_markup("\n");
            out.append_content(python_json_dumps(parse_json(tool, "a tool")));
        }
        out.append_markup(
            "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call>");
    }
    out.append_markup("<|im_end|>\n");
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user" || (m.role == "system" && i > 0) || (m.role == "assistant" && m.tool_calls.empty())) {
            out.append_markup("<|im_start|>");
            out.append_markup(m.role);
            out.append_markup("\n");
            out.append_content(m.content);
            out.append_markup("<|im_end|>\n");
        } else if (m.role == "assistant") {
            out.append_markup("<|im_start|>assistant");
            if (!m.content.empty()) {
                out.append_markup("\n");
                out.append_content(m.content);
            }
            for (const ToolCall& call : m.tool_calls) {
                out.append_markup("\n<tool_call>\n{\"name\": \"");
                out.append_content(call.name);
                out.append_markup("\", \"arguments\": ");
                out.append_content(arguments_json(call));
                out.append_markup("}\n</tool_call>");
            }
            out.append_markup("<|im_end|>\n");
        } else if (m.role == "tool") {
            if (i == 0 || messages[i - 1].role != "tool") out.append_markup("<|im_start|>user");
            out.append_markup("\n<tool_response>\n");
            out.append_content(m.content);
            out.append_markup("\n</tool_response>");
            if (i + 1 == messages.size() || messages[i + 1].role != "tool") out.append_markup("<|im_end|>\n");
        }
    }
    if (add_generation_prompt == AddGenerationPrompt::yes) out.append_markup("<|im_start|>assistant\n");
    return out;
}

ChatPrompt render_llama3_tools(const ChatTemplate::Impl& t, std::span<const ChatMessage> messages,
                               std::span<const std::string> tools, AddGenerationPrompt add_generation_prompt) {
    ChatPrompt out;
    out.append_markup("<|begin_of_text|>");
    std::string_view system;
    if (messages.front().role == "system") {
        system = python_strip(messages.front().content);
        messages = messages.subspan(1);
    }
    append_llama3_header(out, "system");
    if (!tools.empty()) out.append_markup("Environment: ipython\n");
    out.append_markup("Cutting Knowledge Date: December 2023\nToday Date: ");
    out.append_markup(t.date_string);
    out.append_markup("\n\n");
    out.append_content(system);
    out.append_markup("<|eot_id|>");
    if (!tools.empty()) {
        if (messages.empty()) {
            throw Error(ErrorCode::invalid_argument,
                        "Cannot put tools in the first user message when there's no first user message!");
        }
        append_llama3_header(out, "user");
        out.append_markup(
            "Given the following functions, please respond with a JSON for a function call with its proper arguments "
            "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
            "dictionary of argument name and its value}.Do not use variables.\n\n");
        for (const std::string& tool : tools) {
            out.append_content(python_json_dumps(parse_json(tool, "a tool"), 4));
            out.append_markup("\n\n");
        }
        out.append_content(python_strip(messages.front().content));
        out.append_markup("<|eot_id|>");
        messages = messages.subspan(1);
    }
    for (const ChatMessage& m : messages) {
        if (m.role == "tool") {
            append_llama3_header(out, "ipython");
            out.append_content(python_json_dumps(ordered_json(m.content)));
            out.append_markup("<|eot_id|>");
        } else if (!m.tool_calls.empty()) {
            if (m.tool_calls.size() != 1) {
                throw Error(ErrorCode::invalid_argument, "This model only supports single tool-calls at once!");
            }
            const ToolCall& call = m.tool_calls.front();
            append_llama3_header(out, "assistant");
            out.append_markup("{\"name\": \"");
            out.append_content(call.name);
            out.append_markup("\", \"parameters\": ");
            out.append_content(arguments_json(call));
            out.append_markup("}<|eot_id|>");
        } else {
            append_llama3_header(out, m.role);
            out.append_content(python_strip(m.content));
            out.append_markup("<|eot_id|>");
        }
    }
    if (add_generation_prompt == AddGenerationPrompt::yes) append_llama3_header(out, "assistant");
    return out;
}

}  // namespace

std::string ChatTemplate::render(std::span<const ChatMessage> messages, std::span<const std::string> tools,
                                 AddGenerationPrompt add_generation_prompt) const {
    return render_prompt(messages, tools, add_generation_prompt).text;
}

ChatPrompt ChatTemplate::render_prompt(std::span<const ChatMessage> messages, std::span<const std::string> tools,
                                       AddGenerationPrompt add_generation_prompt) const {
    if (messages.empty()) {
        throw Error(ErrorCode::invalid_argument, "cannot render an empty conversation: give at least one message");
    }
    bool tool_messages = false;
    for (const ChatMessage& message : messages) tool_messages |= message.role == "tool" || !message.tool_calls.empty();
    if (tools.empty() && !tool_messages) return impl_->render_plain(messages, add_generation_prompt);
    if (impl_->tool_call_format == ToolCallFormat::none) {
        const std::string why = "the chat template '" + impl_->name +
                                "' defines no tools (tool calling needs Qwen 2.5's or Llama 3.1/3.2's template)";
        if (!tools.empty()) throw Error(ErrorCode::unsupported, why);
        for (size_t i = 0; i < messages.size(); ++i) {
            if (messages[i].role == "tool" || !messages[i].tool_calls.empty()) {
                throw Error(ErrorCode::invalid_argument,
                            "message " + std::to_string(i) + " has the role \"" + messages[i].role + "\"" +
                                (messages[i].tool_calls.empty() ? "" : " with tool_calls") + "; " + why);
            }
        }
    }
    check_roles(messages);
    return impl_->tool_call_format == ToolCallFormat::qwen
               ? render_qwen_tools(*impl_, messages, tools, add_generation_prompt)
               : render_llama3_tools(*impl_, messages, tools, add_generation_prompt);
}

}  // namespace kvstash
