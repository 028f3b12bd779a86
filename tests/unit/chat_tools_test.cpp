// Chat templates with tools against transformers: every case of tests/fixtures/chat/tools.json (written by
// tests/reference/make_tool_template_fixture.py) rendered by kvstash must be the same bytes, or refused where
// the template raises. Also: templates without tools refuse tools, and python_json_dumps' number formats.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "support/paths.h"
#include "text/chat_template_detect.h"
#include "text/python_json.h"

namespace kvstash::test {
namespace {

using nlohmann::ordered_json;

ordered_json load_fixture() {
    std::ifstream in(fixture_path("chat/tools.json"));
    EXPECT_TRUE(in.good()) << "missing tests/fixtures/chat/tools.json";
    return ordered_json::parse(in);
}

std::vector<ChatMessage> messages_of(const ordered_json& list) {
    std::vector<ChatMessage> out;
    for (const auto& m : list) {
        ChatMessage message{m["role"].get<std::string>(),
                            m["content"].is_null() ? "" : m["content"].get<std::string>()};
        if (m.contains("tool_calls")) {
            for (const auto& call : m["tool_calls"]) {
                message.tool_calls.push_back({call["id"].get<std::string>(),
                                              call["function"]["name"].get<std::string>(),
                                              call["function"]["arguments"].get<std::string>()});
            }
        }
        if (m.contains("tool_call_id")) message.tool_call_id = m["tool_call_id"].get<std::string>();
        out.push_back(std::move(message));
    }
    return out;
}

TEST(ChatTools, RenderingMatchesTransformers) {
    const ordered_json fixture = load_fixture();
    ASSERT_EQ(fixture["templates"].size(), 3u);
    int checked = 0;
    for (const auto& [name, entry] : fixture["templates"].items()) {
        const ChatTemplate tmpl = detect_chat_template(entry["template"].get<std::string>());
        ASSERT_NE(tmpl.tool_call_format(), ToolCallFormat::none) << name;
        for (size_t i = 0; i < entry["cases"].size(); ++i) {
            const auto& c = entry["cases"][i];
            const std::vector<ChatMessage> messages = messages_of(c["messages"]);
            std::vector<std::string> tools;
            for (const auto& tool : c["tools"]) tools.push_back(tool.dump());
            const auto add =
                c["add_generation_prompt"].get<bool>() ? AddGenerationPrompt::yes : AddGenerationPrompt::no;
            if (c.contains("error")) {
                EXPECT_THROW(tmpl.render(messages, tools, add), Error) << name << " case " << i;
            } else {
                EXPECT_EQ(tmpl.render(messages, tools, add), c["rendered"].get<std::string>()) << name << " case " << i;
            }
            ++checked;
        }
    }
    EXPECT_EQ(checked, 30);
}

TEST(ChatTools, ToolMessagesWithoutToolsRenderAsTheTemplateDoes) {
    // render() without tools takes tool messages too (the fixture's no-tools cases go through the tools path).
    const ordered_json fixture = load_fixture();
    const auto& entry = fixture["templates"]["qwen2_5"];
    const ChatTemplate tmpl = detect_chat_template(entry["template"].get<std::string>());
    for (const auto& c : entry["cases"]) {
        if (!c["tools"].empty()) continue;
        EXPECT_EQ(tmpl.render(messages_of(c["messages"]), AddGenerationPrompt::yes), c["rendered"].get<std::string>());
    }
}

TEST(ChatTools, TemplatesWithoutToolsRefuseThem) {
    const ChatTemplate chatml = ChatTemplate::named("chatml");
    EXPECT_EQ(chatml.tool_call_format(), ToolCallFormat::none);
    const std::vector<ChatMessage> messages{{"user", "Hi"}};
    const std::vector<std::string> tools{R"({"type": "function", "function": {"name": "f"}})"};
    try {
        (void)chatml.render(messages, tools, AddGenerationPrompt::yes);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::unsupported);
        EXPECT_NE(std::string(e.what()).find("chatml"), std::string::npos) << e.what();
    }
    try {
        (void)chatml.render(std::vector<ChatMessage>{{"user", "Hi"}, {"tool", "22"}}, AddGenerationPrompt::yes);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("message 1 has the role \"tool\""), std::string::npos) << e.what();
    }
    EXPECT_EQ(ChatTemplate::named("llama3").tool_call_format(), ToolCallFormat::llama3);
    EXPECT_EQ(ChatTemplate::named("llama3.0").tool_call_format(), ToolCallFormat::none);
}

TEST(ChatTools, PythonJsonNumbers) {
    const auto dumps = [](const char* text) { return python_json_dumps(ordered_json::parse(text)); };
    EXPECT_EQ(dumps("[1.0, 0.1, 1e-05, 0.0001, 1e16, 1.5e16, 123456789.125, -2.25, 3e20, 1e300, 5e-324, 100.0]"),
              "[1.0, 0.1, 1e-05, 0.0001, 1e+16, 1.5e+16, 123456789.125, -2.25, 3e+20, 1e+300, 5e-324, 100.0]");
    EXPECT_EQ(dumps("[0, -3, 18446744073709551615, 1234567890123456.0]"),
              "[0, -3, 18446744073709551615, 1234567890123456.0]");
    EXPECT_EQ(dumps(R"({"b": {}, "a": [], "s": "\u0001\u007f\n"})"),
              "{\"b\": {}, \"a\": [], \"s\": \"\\u0001\x7f\\n\"}");
}

}  // namespace
}  // namespace kvstash::test
