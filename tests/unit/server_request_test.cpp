// The pure request parser (server/openai_request.h): JSON in, a plain request struct or a 400 ApiError
// naming the field out; no model. Messages are the ones the HTTP e2e tests see.
#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

const RequestLimits kLimits{4, {}};

CompletionRequest text(const std::string& body) {
    return parse_completion_request(parse_json_body(body), Endpoint::text, kLimits);
}
CompletionRequest chat(const std::string& body) {
    return parse_completion_request(parse_json_body(body), Endpoint::chat, kLimits);
}

// Runs fn and checks the ApiError: status 400, `param`, `code` and a part of the message.
template <typename Fn>
void expect_bad_request(Fn fn, const std::string& param, const std::string& code, const std::string& message_part) {
    try {
        fn();
        ADD_FAILURE() << "accepted; expected an error on '" << param << "'";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400) << e.what();
        EXPECT_EQ(e.param(), param) << e.what();
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find(message_part), std::string::npos) << e.what();
    }
}

TEST(ServerRequest, MalformedJsonAndNonObjectsAreInvalidJson) {
    for (const char* body : {"", "{", "{\"prompt\": }", "[1, 2", "nul", "{\"a\": 1} x"}) {
        SCOPED_TRACE(body);
        expect_bad_request([&] { parse_json_body(body); }, "", "invalid_json", "the request body is not valid JSON");
    }
    for (const char* body : {"[]", "1", "\"text\"", "null", "true"}) {
        SCOPED_TRACE(body);
        expect_bad_request([&] { parse_json_body(body); }, "", "invalid_json", "must be a JSON object");
    }
}

TEST(ServerRequest, TextCompletionDefaultsAndFields) {
    const CompletionRequest r = text(R"({"prompt": "Hello", "model": "any"})");
    EXPECT_FALSE(r.chat);
    EXPECT_EQ(r.prompt, "Hello");
    EXPECT_TRUE(r.messages.empty());
    EXPECT_FALSE(r.stream);
    EXPECT_FALSE(r.logprobs);
    EXPECT_EQ(r.top_logprobs, -1);
    EXPECT_EQ(r.n, 1);
    EXPECT_FALSE(r.max_tokens);
    EXPECT_FALSE(r.seed);
    EXPECT_FALSE(r.state);
    // OpenAI's sampling defaults, with top-k 40.
    EXPECT_EQ(r.sampling.temperature, 1.0f);
    EXPECT_EQ(r.sampling.top_p, 1.0f);
    EXPECT_EQ(r.sampling.min_p, 0.0f);
    EXPECT_EQ(r.sampling.top_k, 40);

    const CompletionRequest all = text(R"({"prompt": ["Hi"], "max_tokens": 7, "temperature": 0, "top_p": 0.5,
        "top_k": 3, "min_p": 0.1, "presence_penalty": -2, "frequency_penalty": 2, "repeat_penalty": 1.1,
        "seed": -5, "logit_bias": {"12": -100, "7": 2.5}, "stop": ["a", "bc"], "n": 4, "stream": true,
        "stream_options": {"include_usage": true}, "logprobs": 3, "state": "my.state-1"})");
    EXPECT_EQ(all.prompt, "Hi");
    EXPECT_EQ(all.max_tokens, 7);
    EXPECT_EQ(all.sampling.temperature, 0.0f);
    EXPECT_EQ(all.sampling.top_p, 0.5f);
    EXPECT_EQ(all.sampling.top_k, 3);
    EXPECT_EQ(all.sampling.min_p, 0.1f);
    EXPECT_EQ(all.sampling.presence_penalty, -2.0f);
    EXPECT_EQ(all.sampling.frequency_penalty, 2.0f);
    EXPECT_EQ(all.sampling.repeat_penalty, 1.1f);
    EXPECT_EQ(all.seed, static_cast<uint64_t>(int64_t{-5}));
    const std::vector<std::pair<int32_t, float>> bias = {{12, -100.0f}, {7, 2.5f}};
    EXPECT_EQ(all.sampling.logit_bias, bias);
    EXPECT_EQ(all.stop, (std::vector<std::string>{"a", "bc"}));
    EXPECT_EQ(all.n, 4);
    EXPECT_TRUE(all.stream);
    EXPECT_TRUE(all.include_usage);
    EXPECT_TRUE(all.logprobs);
    EXPECT_EQ(all.top_logprobs, 3);
    EXPECT_EQ(all.state, "my.state-1");

    EXPECT_EQ(text(R"({"prompt": "x", "max_completion_tokens": 9})").max_tokens, 9);
    EXPECT_EQ(text(R"({"prompt": "x", "stop": "end"})").stop, std::vector<std::string>{"end"});
    // JSON null is "not given".
    const CompletionRequest nulls = text(R"({"prompt": "x", "max_tokens": null, "seed": null, "stop": null})");
    EXPECT_FALSE(nulls.max_tokens);
    EXPECT_FALSE(nulls.seed);
    EXPECT_TRUE(nulls.stop.empty());
}

TEST(ServerRequest, UnknownFieldsAreIgnored) {
    const CompletionRequest r = text(R"({"prompt": "x", "user": 17, "frobnicate": {"a": [1]}, "echo": false,
        "best_of": 1, "tools": []})");
    EXPECT_EQ(r.prompt, "x");
}

// OpenAI's prompt shapes (issue 33 item 8): a string, token ids, or an array of either.
TEST(ServerRequest, PromptArraysAndTokenIds) {
    EXPECT_EQ(text(R"({"prompt": ["Hi"]})").prompt, "Hi");
    const CompletionRequest ids = text(R"({"prompt": [1, 2, 3], "echo": true})");
    EXPECT_FALSE(ids.prompt);
    EXPECT_EQ(ids.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
    EXPECT_TRUE(ids.echo);
    const CompletionRequest several = text(R"({"prompt": ["a", [4, 5], "c"], "n": 2})");
    EXPECT_FALSE(several.prompt);
    EXPECT_FALSE(several.prompt_tokens);
    ASSERT_EQ(several.prompts.size(), 3u);
    EXPECT_EQ(several.prompts[0].text, "a");
    EXPECT_EQ(several.prompts[1].tokens, (std::vector<int32_t>{4, 5}));
    EXPECT_EQ(several.prompts[2].text, "c");
    EXPECT_FALSE(several.prompts[2].tokens);
    expect_bad_request([] { text(R"({"prompt": [1, -2]})"); }, "prompt", "invalid_value", "must be between");
}

TEST(ServerRequest, UnsupportedFieldsAreRefused) {
    expect_bad_request([] { text(R"({"prompt": "x", "echo": true, "logprobs": 1})"); }, "echo", "unsupported",
                       "not supported");
    expect_bad_request([] { text(R"({"prompt": "x", "suffix": "y"})"); }, "suffix", "unsupported", "not supported");
    expect_bad_request([] { text(R"({"prompt": "x", "best_of": 2})"); }, "best_of", "unsupported", "use n");
    expect_bad_request([] { chat(R"({"messages": [], "tools": [{"type": "retrieval"}]})"); }, "tools", "unsupported",
                       "only tools of type");
    expect_bad_request([] { chat(R"({"messages": [], "tools": [{"type": "function"}]})"); }, "tools", "invalid_type",
                       "function must be an object");
    expect_bad_request([] { chat(R"({"messages": [], "functions": [{"name": "f"}]})"); }, "functions", "unsupported",
                       "not supported");
    expect_bad_request([] { chat(R"({"messages": [], "tool_choice": "required"})"); }, "tool_choice", "invalid_value",
                       "no 'tools'");
}

TEST(ServerRequest, ToolsAndToolMessages) {
    // Tools keep the client's key order when the raw body is given (nlohmann::json sorts keys).
    const std::string raw = R"({"messages": [{"role": "user", "content": "x"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "f", "arguments": "{\"b\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": false})";
    const CompletionRequest r =
        parse_completion_request(nlohmann::json::parse(raw), Endpoint::chat, RequestLimits{4, {}}, &raw);
    ASSERT_EQ(r.tools.definitions.size(), 1u);
    EXPECT_EQ(r.tools.definitions[0].find("\"type\":\"function\""), 1u) << r.tools.definitions[0];
    EXPECT_LT(r.tools.definitions[0].find("\"z\""), r.tools.definitions[0].find("\"a\""));
    EXPECT_EQ(r.tools.choice, ToolChoice::named);
    EXPECT_EQ(r.tools.name, "f");
    EXPECT_FALSE(r.tools.parallel);
    ASSERT_EQ(r.messages.size(), 3u);
    ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
    EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"b\": 1}");
    EXPECT_EQ(r.messages[2].tool_call_id, "c1");
    EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
        "function": {"name": "f"}}]})")
                  .tools.choice,
              ToolChoice::automatic);
    expect_bad_request(
        [] {
            chat(
                R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]})");
        },
        "messages", "invalid_value", "must be a JSON object");
}

TEST(ServerRequest, ResponseFormatAndGrammar) {
    EXPECT_EQ(text(R"({"prompt": "x"})").grammar, nullptr);
    EXPECT_EQ(text(R"({"prompt": "x", "response_format": {"type": "text"}})").grammar, nullptr);
    EXPECT_NE(text(R"({"prompt": "x", "response_format": {"type": "json_object"}})").grammar, nullptr);
    const auto schema = text(R"({"prompt": "x", "response_format": {"type": "json_schema",
        "json_schema": {"name": "n", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})");
    ASSERT_NE(schema.grammar, nullptr);
    EXPECT_NE(schema.grammar->gbnf().find("integer"), std::string::npos);
    EXPECT_NE(text(R"({"prompt": "x", "grammar": "root ::= \"a\""})").grammar, nullptr);
    expect_bad_request([] { text(R"({"prompt": "x", "grammar": "root ::= (\"a\""})"); }, "grammar", "invalid_value",
                       "line 1, column");
    expect_bad_request(
        [] {
            text(R"({"prompt": "x", "response_format": {"type": "json_schema",
                "json_schema": {"schema": {"type": "string", "pattern": "a"}}}})");
        },
        "response_format.json_schema.schema", "unsupported", "/pattern");
    expect_bad_request([] { text(R"({"prompt": "x", "response_format": {"type": "json_schema"}})"); },
                       "response_format.json_schema", "invalid_type", "");
    expect_bad_request([] { text(R"({"prompt": "x", "response_format": {"type": "xml"}})"); }, "response_format",
                       "unsupported", "xml");
    expect_bad_request([] { text(R"({"prompt": "x", "response_format": "json"})"); }, "response_format", "invalid_type",
                       "");
}

TEST(ServerRequest, WrongTypesNameTheField) {
    struct Case {
        const char* body;
        const char* param;
    };
    for (const Case& c : std::vector<Case>{
             {R"({"prompt": 5})", "prompt"},
             {R"({"prompt": ["a", 1]})", "prompt"},
             {R"({"prompt": [[1], "b", []]})", "prompt"},
             {R"({"prompt": []})", "prompt"},
             {R"({"prompt": "x", "max_tokens": "8"})", "max_tokens"},
             {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
             {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
             {R"({"prompt": "x", "stream": 1})", "stream"},
             {R"({"prompt": "x", "stream_options": true})", "stream_options"},
             {R"({"prompt": "x", "stream_options": {"include_usage": "yes"}})", "stream_options.include_usage"},
             {R"({"prompt": "x", "stop": 3})", "stop"},
             {R"({"prompt": "x", "stop": ["a", 3]})", "stop"},
             {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias"},
             {R"({"prompt": "x", "logit_bias": {"1": "x"}})", "logit_bias"},
             {R"({"prompt": "x", "seed": 1.0})", "seed"},
             {R"({"prompt": "x", "model": 3})", "model"},
             {R"({"prompt": "x", "state": 3})", "state"},
             {R"({"prompt": "x", "logprobs": true})", "logprobs"}}) {
        SCOPED_TRACE(c.body);
        expect_bad_request([&] { text(c.body); }, c.param, "invalid_type", "must be");
    }
    expect_bad_request([] { chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})"); }, "logprobs",
                       "invalid_type", "true or false");
}

TEST(ServerRequest, OutOfRangeValuesNameTheFieldAndTheRange) {
    struct Case {
        const char* body;
        const char* param;
        const char* message_part;
    };
    for (const Case& c : std::vector<Case>{
             {R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "between 1 and 2147483647, got 0"},
             {R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens", "at most 2147483647"},
             {R"({"prompt": "x", "n": 5})", "n", "must be at most 4"},  // positive JSON integers are unsigned
             {R"({"prompt": "x", "n": 0})", "n", "between 1 and 4, got 0"},
             {R"({"prompt": "x", "temperature": -0.5})", "temperature", "between 0"},
             {R"({"prompt": "x", "top_p": 1.5})", "top_p", "between 0"},
             {R"({"prompt": "x", "top_k": -1})", "top_k", "between 0 and 1048576"},
             {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty", "between -2"},
             {R"({"prompt": "x", "repeat_penalty": 0})", "repeat_penalty", "between"},
             {R"({"prompt": "x", "seed": 18446744073709551615})", "seed", "at most"},
             {R"({"prompt": "x", "logprobs": 21})", "logprobs", "must be at most 20"},
             {R"({"prompt": "x", "logit_bias": {"1": 101}})", "logit_bias", "between -100"},
             {R"({"prompt": "x", "logit_bias": {"-1": 1}})", "logit_bias", "is not a token id"},
             {R"({"prompt": "x", "logit_bias": {"1x": 1}})", "logit_bias", "is not a token id"},
             {R"({"prompt": "x", "stop": ""})", "stop", "empty"},
             {R"({"prompt": "x", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
              "stop", "at most 16"},
         }) {
        SCOPED_TRACE(c.body);
        expect_bad_request([&] { text(c.body); }, c.param, "invalid_value", c.message_part);
    }
    expect_bad_request([] { text(R"({"prompt": "x", "state": ".hidden"})"); }, "state", "invalid_state_name",
                       "invalid state name");
}

TEST(ServerRequest, PromptIsRequiredUnlessAStateIsContinued) {
    expect_bad_request([] { text(R"({"max_tokens": 3})"); }, "prompt", "missing_field", "'prompt' is required");
    const CompletionRequest r = text(R"({"state": "s"})");
    EXPECT_FALSE(r.prompt);
    EXPECT_EQ(r.state, "s");
}

TEST(ServerRequest, ChatReadsMessagesAndBooleanLogprobs) {
    const CompletionRequest r = chat(R"({"messages": [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
        {"role": "assistant", "content": ""}], "logprobs": true, "top_logprobs": 2, "prompt": 5})");
    EXPECT_TRUE(r.chat);
    ASSERT_EQ(r.messages.size(), 3u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[0].content, "Be brief.");
    EXPECT_EQ(r.messages[1].content, "Hello");
    EXPECT_EQ(r.messages[2].content, "");
    EXPECT_FALSE(r.prompt) << "chat completions ignore 'prompt'";
    EXPECT_TRUE(r.logprobs);
    EXPECT_EQ(r.top_logprobs, 2);
    EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})").top_logprobs, 0);
    EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})").top_logprobs, -1);

    expect_bad_request([] { chat(R"({"prompt": "x"})"); }, "messages", "missing_field", "'messages' is required");
    expect_bad_request([] { chat(R"({"messages": []})"); }, "messages", "invalid_type", "non-empty array");
    expect_bad_request([] { chat(R"({"messages": ["hi"]})"); }, "messages", "invalid_type", "{role, content}");
    expect_bad_request([] { chat(R"({"messages": [{"content": "x"}]})"); }, "messages", "invalid_type",
                       "string 'role'");
    expect_bad_request([] { chat(R"({"messages": [{"role": "robot", "content": "x"}]})"); }, "messages",
                       "invalid_value", "unsupported message role 'robot'");
    // Null content is OpenAI's for assistant messages with tool calls only.
    expect_bad_request(
        [] { chat(R"({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": null}]})"); },
        "messages", "invalid_value", "messages[1].content is null");
    expect_bad_request([] { chat(R"({"messages": [{"role": "assistant", "content": null}]})"); }, "messages",
                       "invalid_value", "tool_calls");
    expect_bad_request([] { chat(R"({"messages": [{"role": "user"}]})"); }, "messages", "invalid_value",
                       "messages[0].content is missing");
    expect_bad_request([] { chat(R"({"messages": [{"role": "user", "content": 3}]})"); }, "messages", "invalid_type",
                       "'content' is a string");
    expect_bad_request([] { chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"); },
                       "messages", "invalid_value", "content parts");
    expect_bad_request([] { chat(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"); },
                       "top_logprobs", "invalid_value", "needs 'logprobs': true");
}

TEST(ServerRequest, PrefillNeedsANameAndOnePrompt) {
    const PrefillRequest p = parse_prefill_request(parse_json_body(R"({"name": "a", "prompt": "Hi"})"));
    EXPECT_EQ(p.name, "a");
    EXPECT_EQ(p.prompt, "Hi");
    const PrefillRequest m = parse_prefill_request(parse_json_body(
        R"({"name": "b", "messages": [{"role": "user", "content": "x"}], "add_generation_prompt": true})"));
    EXPECT_FALSE(m.prompt);
    ASSERT_EQ(m.messages.size(), 1u);
    EXPECT_TRUE(m.add_generation_prompt);

    const auto prefill = [](const char* body) { parse_prefill_request(parse_json_body(body)); };
    expect_bad_request([&] { prefill(R"({"prompt": "x"})"); }, "name", "missing_field", "'name' is required");
    expect_bad_request([&] { prefill(R"({"name": 1, "prompt": "x"})"); }, "name", "invalid_type", "a string");
    expect_bad_request([&] { prefill(R"({"name": "a/b", "prompt": "x"})"); }, "name", "invalid_state_name",
                       "invalid state name 'a/b'");
    expect_bad_request([&] { prefill(R"({"name": "a"})"); }, "prompt", "missing_field", "exactly one");
    expect_bad_request([&] { prefill(R"({"name": "a", "prompt": "x", "messages": []})"); }, "messages", "missing_field",
                       "exactly one");
    expect_bad_request([&] { prefill(R"({"name": "a", "prompt": ["x"]})"); }, "prompt", "invalid_type", "a string");
    expect_bad_request(
        [&] {
            prefill(R"({"name": "a", "messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 1})");
        },
        "add_generation_prompt", "invalid_type", "true or false");
}

}  // namespace
}  // namespace kvstash::server
