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

#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "text/chat_template_impl.h"
#include "text/python_json.h"
#include "text/python_strip.h"

namespace kvstash {
namespace {

using nlohmann::ordered_json;

ordered_json parse_json(const std::string& text, const std::string& what) {
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

void append_llama3_header(std::string& out, std::string_view role) {
    out.append("<|start_header_id|>").append(role).append("<|end_header_id|>\n\n");
}

std::string render_qwen_tools(const ChatTemplate::Impl& t, std::span<const ChatMessage> messages,
                              std::span<const std::string> tools, AddGenerationPrompt add_generation_prompt) {
    std::string out = "<|im_start|>system\n";
    const bool leading_system = messages.front().role == "system";
    out += leading_system ? messages.front().content : t.default_system;
    if (!tools.empty()) {
        out +=
            "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
            "with function signatures within <tools></tools> XML tags:\n<tools>";
        for (const std::string& tool : tools) out.append("\n").append(python_json_dumps(parse_json(tool, "a tool")));
        out +=
            "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call>";
    }
    out += "<|im_end|>\n";
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user" || (m.role == "system" && i > 0) || (m.role == "assistant" && m.tool_calls.empty())) {
            out.append("<|im_start|>").append(m.role).append("\n").append(m.content).append("<|im_end|>\n");
        } else if (m.role == "assistant") {
            out += "<|im_start|>assistant";
            if (!m.content.empty()) out.append("\n").append(m.content);
            for (const ToolCall& call : m.tool_calls) {
                out.append("\n<tool_call>\n{\"name\": \"").append(call.name).append("\", \"arguments\": ");
                out.append(arguments_json(call)).append("}\n</tool_call>");
            }
            out += "<|im_end|>\n";
        } else if (m.role == "tool") {
            if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
            out.append("\n<tool_response>\n").append(m.content).append("\n</tool_response>");
            if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
        }
    }
    if (add_generation_prompt == AddGenerationPrompt::yes) out += "<|im_start|>assistant\n";
    return out;
}

std::string render_llama3_tools(const ChatTemplate::Impl& t, std::span<const ChatMessage> messages,
                                std::span<const std::string> tools, AddGenerationPrompt add_generation_prompt) {
    std::string out = "<|begin_of_text|>";
    std::string_view system;
    if (messages.front().role == "system") {
        system = python_strip(messages.front().content);
        messages = messages.subspan(1);
    }
    append_llama3_header(out, "system");
    if (!tools.empty()) out += "Environment: ipython\n";
    out.append("Cutting Knowledge Date: December 2023\nToday Date: ").append(t.date_string).append("\n\n");
    out.append(system).append("<|eot_id|>");
    if (!tools.empty()) {
        if (messages.empty()) {
            throw Error(ErrorCode::invalid_argument,
                        "Cannot put tools in the first user message when there's no first user message!");
        }
        append_llama3_header(out, "user");
        out +=
            "Given the following functions, please respond with a JSON for a function call with its proper arguments "
            "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
            "dictionary of argument name and its value}.Do not use variables.\n\n";
        for (const std::string& tool : tools) out += python_json_dumps(parse_json(tool, "a tool"), 4) + "\n\n";
        out.append(python_strip(messages.front().content)).append("<|eot_id|>");
        messages = messages.subspan(1);
    }
    for (const ChatMessage& m : messages) {
        if (m.role == "tool") {
            append_llama3_header(out, "ipython");
            out += python_json_dumps(ordered_json(m.content)) + "<|eot_id|>";
        } else if (!m.tool_calls.empty()) {
            if (m.tool_calls.size() != 1) {
                throw Error(ErrorCode::invalid_argument, "This model only supports single tool-calls at once!");
            }
            const ToolCall& call = m.tool_calls.front();
            append_llama3_header(out, "assistant");
            out.append("{\"name\": \"").append(call.name).append("\", \"parameters\": ");
            out.append(arguments_json(call)).append("}<|eot_id|>");
        } else {
            append_llama3_header(out, m.role);
            out.append(python_strip(m.content)).append("<|eot_id|>");
        }
    }
    if (add_generation_prompt == AddGenerationPrompt::yes) append_llama3_header(out, "assistant");
    return out;
}

}  // namespace

std::string ChatTemplate::render(std::span<const ChatMessage> messages, std::span<const std::string> tools,
                                 AddGenerationPrompt add_generation_prompt) const {
    if (messages.empty()) {
        throw Error(ErrorCode::invalid_argument, "cannot render an empty conversation: give at least one message");
    }
    bool tool_messages = false;
    for (const ChatMessage& message : messages) tool_messages |= message.role == "tool" || !message.tool_calls.empty();
    if (tools.empty() && !tool_messages) return render(messages, add_generation_prompt);  // the plain template
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
