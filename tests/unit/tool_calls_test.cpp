// Tool calls: the call grammar (several tools' schemas in one grammar, the Qwen 2.5 and Llama 3.1
// formats), the lazy constraint of tool_choice "auto", and reading calls out of a reply.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "grammar/gbnf_parse.h"
#include "grammar/grammar_access.h"
#include "grammar/grammar_matcher.h"
#include "grammar/tool_call_grammar.h"
#include "kvstash/error.h"
#include "kvstash/grammar.h"
#include "text/tool_call_parse.h"

namespace kvstash::test {
namespace {

using grammar::GrammarMatcher;
using grammar::TokenTrie;

// Token i < 256: the byte i; 256: the end token.
std::shared_ptr<const TokenTrie> byte_trie() {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    pieces.push_back("</s>");
    return std::make_shared<TokenTrie>(pieces, std::vector<uint8_t>{}, std::vector<int32_t>{256});
}

const std::vector<ToolSchema> kTools = {
    {"get_weather", R"({"type": "object", "properties": {"city": {"type": "string"},
                        "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]})"},
    {"add", R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"], "$defs": {"unused": {"type": "string"}}})"},
    {"now", R"({"type": "object", "properties": {}})"},
};

bool accepts(ToolCallFormat format, ToolCallCount count, const std::string& text) {
    const std::string gbnf = grammar::tool_call_gbnf(format, kTools, count);
    GrammarMatcher m(std::make_shared<grammar::ParsedGrammar>(grammar::parse_gbnf(gbnf)), byte_trie());
    return m.accept_bytes(text) && m.can_end();
}

TEST(ToolCallGrammar, QwenCallsFollowEachToolsSchema) {
    const auto q = ToolCallFormat::qwen;
    EXPECT_TRUE(
        accepts(q, ToolCallCount::one,
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
    EXPECT_TRUE(accepts(q, ToolCallCount::one,
                        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": -2}}\n</tool_call>"));
    EXPECT_TRUE(accepts(q, ToolCallCount::one, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
    // Another tool's arguments, a missing required key, a value outside the enum, an unknown tool.
    EXPECT_FALSE(accepts(q, ToolCallCount::one,
                         "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
    EXPECT_FALSE(
        accepts(q, ToolCallCount::one, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
    EXPECT_FALSE(accepts(q, ToolCallCount::one,
                         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"K\"}}\n"
                         "</tool_call>"));
    EXPECT_FALSE(accepts(q, ToolCallCount::one, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
    const std::string two =
        "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
    EXPECT_TRUE(accepts(q, ToolCallCount::one_or_more, two));
    EXPECT_FALSE(accepts(q, ToolCallCount::one, two));
}

TEST(ToolCallGrammar, Llama3CallIsTheWholeReply) {
    EXPECT_TRUE(accepts(ToolCallFormat::llama3, ToolCallCount::one,
                        "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}"));
    EXPECT_FALSE(accepts(ToolCallFormat::llama3, ToolCallCount::one,
                         "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}"));
}

TEST(ToolCallGrammar, RulesOfEachSchemaArePrefixed) {
    const std::string gbnf =
        grammar::prefix_rules("root ::= \"{\" space root-a \"}\" [a-z]{1,3}\nroot-a ::= string\n", "t0-");
    EXPECT_EQ(gbnf, "t0-root ::= \"{\" space t0-root-a \"}\" [a-z]{1,3}\nt0-root-a ::= string\n");
}

TEST(ToolCallGrammar, BadSchemaNamesTheTool) {
    const std::vector<ToolSchema> tools = {{"f", R"({"type": "object", "properties": {"x": {"minimum": 1}}})"}};
    try {
        (void)grammar::tool_call_gbnf(ToolCallFormat::qwen, tools, ToolCallCount::one_or_more);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tool 'f'"), std::string::npos) << e.what();
    }
}

// The lazy constraint: nothing masked (logits untouched, bitwise) until "<tool_call>" was generated, then
// the grammar from the trigger on.
TEST(ToolCallGrammar, LazyConstraintWaitsForTheTrigger) {
    auto vocabulary = GrammarAccess::vocabulary(byte_trie());
    auto g = Grammar::for_tool_calls(ToolCallFormat::qwen, kTools, ToolCallCount::one);
    GrammarConstraint c(g, vocabulary, tool_call_trigger(ToolCallFormat::qwen));
    std::vector<float> logits(257);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i)) * 3.0f;
    const std::vector<float> before = logits;
    for (const char ch : std::string("Let me check. <tool_cal")) {
        ASSERT_TRUE(c.mask(logits));
        ASSERT_EQ(std::memcmp(logits.data(), before.data(), logits.size() * sizeof(float)), 0);
        EXPECT_FALSE(c.active());
        EXPECT_TRUE(c.can_end());
        c.accept(static_cast<unsigned char>(ch));
    }
    c.accept('l');
    c.accept('>');
    EXPECT_TRUE(c.active());
    ASSERT_TRUE(c.mask(logits));
    for (int b = 0; b < 257; ++b) EXPECT_EQ(std::isinf(logits[static_cast<size_t>(b)]), b != '\n') << b;
    for (const char ch : std::string("\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>")) {
        c.accept(static_cast<unsigned char>(ch));
    }
    EXPECT_TRUE(c.must_end());

    // Llama 3.1: only a reply that starts with {"name" is a call; anything else stays free for good.
    auto l = Grammar::for_tool_calls(ToolCallFormat::llama3, kTools, ToolCallCount::one);
    GrammarConstraint free_text(l, vocabulary, tool_call_trigger(ToolCallFormat::llama3));
    for (const char ch : std::string("Hi {\"name\"")) free_text.accept(static_cast<unsigned char>(ch));
    EXPECT_FALSE(free_text.active());
    GrammarConstraint call(l, vocabulary, tool_call_trigger(ToolCallFormat::llama3));
    for (const char ch : std::string(" {\"name\": \"a")) call.accept(static_cast<unsigned char>(ch));
    EXPECT_TRUE(call.active());
    EXPECT_TRUE(call.allows('d'));
    EXPECT_FALSE(call.allows('x'));
}

TEST(ToolCallParse, Qwen) {
    const auto p =
        parse_tool_calls(ToolCallFormat::qwen,
                         "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                         "\"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", "
                         "\"arguments\": {}}\n</tool_call>");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.content, "Checking.");
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, "{\"city\":\"Paris\",\"unit\":\"celsius\"}");
    EXPECT_EQ(p.calls[1].arguments, "{}");
    // Cut short, malformed, or no call: all text.
    for (const char* text : {"<tool_call>\n{\"name\": \"now\", \"argu", "<tool_call>\n{\"name\": 3}\n</tool_call>",
                             "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call> trailing", "plain"}) {
        const auto q = parse_tool_calls(ToolCallFormat::qwen, text);
        EXPECT_TRUE(q.calls.empty()) << text;
        EXPECT_EQ(q.content, text);
    }
}

TEST(ToolCallParse, Llama3) {
    const auto p =
        parse_tool_calls(ToolCallFormat::llama3, " {\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}\n");
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].name, "add");
    EXPECT_EQ(p.calls[0].arguments, "{\"a\":1,\"b\":2}");
    EXPECT_TRUE(parse_tool_calls(ToolCallFormat::llama3, "The answer is {\"name\": 1}").calls.empty());
    EXPECT_TRUE(parse_tool_calls(ToolCallFormat::none, "<tool_call>{}</tool_call>").calls.empty());
}

TEST(ToolCallParse, StreamingHoldsBackWhatMayBeACall) {
    EXPECT_EQ(tool_call_free_prefix(ToolCallFormat::qwen, "Hello <tool"), 6u);
    EXPECT_EQ(tool_call_free_prefix(ToolCallFormat::qwen, "Hello <b>"), 9u);
    EXPECT_EQ(tool_call_free_prefix(ToolCallFormat::qwen, "Hi <tool_call>\n{\"na"), 3u);
    EXPECT_EQ(tool_call_free_prefix(ToolCallFormat::llama3, "  {\"na"), 0u);
    EXPECT_EQ(tool_call_free_prefix(ToolCallFormat::llama3, "Sure"), 4u);
    EXPECT_EQ(tool_call_free_prefix(ToolCallFormat::none, "<tool"), 5u);
}

}  // namespace
}  // namespace kvstash::test
