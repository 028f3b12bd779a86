// Ollama's request bodies (server/ollama_request.h) -> the OpenAI routes' CompletionRequest: Ollama's
// defaults and option names, format and tools translated, and every field without a meaning here refused
// (400 naming it) rather than ignored. Pure: no model.
#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"
#include "server/ollama_request.h"

namespace kvstash::server {
namespace {

using nlohmann::json;

const RequestLimits kLimits{4, {}};

OllamaRequest parse(const std::string& body, OllamaEndpoint endpoint = OllamaEndpoint::chat) {
    return parse_ollama_request(json::parse(body), endpoint, kLimits, &body);
}

void expect_refused(const std::string& body, OllamaEndpoint endpoint, const std::string& message_part) {
    try {
        parse(body, endpoint);
        ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400) << e.what();
        EXPECT_NE(std::string(e.what()).find(message_part), std::string::npos) << e.what();
    }
}

constexpr const char* kHi = R"("messages": [{"role": "user", "content": "Hi"}])";

TEST(ServerOllamaRequest, ChatTakesOllamasDefaultsAndStreamsByDefault) {
    const OllamaRequest r = parse(std::string(R"({"model": "m", )") + kHi + "}");
    EXPECT_EQ(r.model, "m");
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.completion.chat);
    ASSERT_EQ(r.completion.messages.size(), 1u);
    EXPECT_FLOAT_EQ(r.completion.sampling.temperature, 0.8f);  // Ollama's documented defaults
    EXPECT_EQ(r.completion.sampling.top_k, 40);
    EXPECT_FLOAT_EQ(r.completion.sampling.top_p, 0.9f);
    EXPECT_FLOAT_EQ(r.completion.sampling.repeat_penalty, 1.1f);
    EXPECT_EQ(r.completion.sampling.repeat_last_n, 64);
    EXPECT_FALSE(r.num_predict);
    EXPECT_FALSE(r.completion.seed);
}

TEST(ServerOllamaRequest, OptionsMapToTheSampler) {
    const OllamaRequest r = parse(std::string(R"({"model": "m", "stream": false, )") + kHi +
                                  R"(, "options": {"temperature": 0.2, "top_k": 5, "top_p": 0.5, "min_p": 0.1,
                                   "seed": 42, "stop": ["\n", "END"], "num_predict": 7, "num_ctx": 512,
                                   "repeat_penalty": 1.3, "repeat_last_n": -1, "presence_penalty": 0.5,
                                   "frequency_penalty": 0.25, "typical_p": 1, "mirostat": 0}})");
    EXPECT_FALSE(r.stream);
    EXPECT_FLOAT_EQ(r.completion.sampling.temperature, 0.2f);
    EXPECT_EQ(r.completion.sampling.top_k, 5);
    EXPECT_FLOAT_EQ(r.completion.sampling.top_p, 0.5f);
    EXPECT_FLOAT_EQ(r.completion.sampling.min_p, 0.1f);
    EXPECT_EQ(r.completion.seed, 42u);
    EXPECT_EQ(r.completion.stop, (std::vector<std::string>{"\n", "END"}));
    EXPECT_EQ(r.num_predict, 7);
    EXPECT_EQ(r.num_ctx, 512);
    EXPECT_FLOAT_EQ(r.completion.sampling.repeat_penalty, 1.3f);
    EXPECT_EQ(r.completion.sampling.repeat_last_n, -1);
    EXPECT_FLOAT_EQ(r.completion.sampling.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(r.completion.sampling.frequency_penalty, 0.25f);
    EXPECT_FALSE(parse(std::string(R"({"model": "m", )") + kHi + R"(, "options": {"num_predict": -1}})").num_predict);
}

TEST(ServerOllamaRequest, FormatAndTools) {
    EXPECT_TRUE(parse(std::string(R"({"model": "m", "format": "json", )") + kHi + "}").completion.grammar);
    EXPECT_TRUE(parse(std::string(R"({"model": "m", "format": {"type": "object"}, )") + kHi + "}").completion.grammar);
    EXPECT_FALSE(parse(std::string(R"({"model": "m", "format": "", )") + kHi + "}").completion.grammar);
    const OllamaRequest tools = parse(std::string(R"({"model": "m", )") + kHi +
                                      R"(, "tools": [{"type": "function", "function": {"name": "f",
                                       "parameters": {"type": "object", "properties": {"b": {}, "a": {}}}}}]})");
    ASSERT_EQ(tools.completion.tools.schemas.size(), 1u);
    EXPECT_EQ(tools.completion.tools.choice, ToolChoice::automatic);
    // The tool's keys keep the client's order (b before a), as they reach the prompt.
    EXPECT_LT(tools.completion.tools.definitions[0].find("\"b\""), tools.completion.tools.definitions[0].find("\"a\""));
    // Ollama's tool_calls (arguments as an object) in an earlier assistant message.
    const OllamaRequest call = parse(R"({"model": "m", "messages": [{"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "content": "2", "tool_name": "f"}]})");
    ASSERT_EQ(call.completion.messages[1].tool_calls.size(), 1u);
    EXPECT_EQ(call.completion.messages[1].tool_calls[0].arguments, R"({"x":1})");
}

TEST(ServerOllamaRequest, GenerateUsesTheChatTemplateUnlessRaw) {
    const OllamaRequest templated =
        parse(R"({"model": "m", "prompt": "Hi", "system": "Be brief."})", OllamaEndpoint::generate);
    ASSERT_TRUE(templated.completion.chat);
    ASSERT_EQ(templated.completion.messages.size(), 2u);
    EXPECT_EQ(templated.completion.messages[0].role, "system");
    const OllamaRequest raw = parse(R"({"model": "m", "prompt": "Hi", "raw": true})", OllamaEndpoint::generate);
    EXPECT_FALSE(raw.completion.chat);
    EXPECT_EQ(raw.completion.prompt, "Hi");
    EXPECT_TRUE(parse(R"({"model": "m"})", OllamaEndpoint::generate).load_only);
    EXPECT_TRUE(parse(R"({"model": "m", "prompt": "", "keep_alive": 0})", OllamaEndpoint::generate).load_only);
    EXPECT_TRUE(parse(R"({"model": "m", "messages": []})").load_only);
}

TEST(ServerOllamaRequest, FieldsWithoutAMeaningHereAreRefused) {
    const auto chat = OllamaEndpoint::chat;
    const auto generate = OllamaEndpoint::generate;
    const std::string hi = std::string(R"({"model": "m", )") + kHi;
    expect_refused(hi + R"(, "options": {"num_gpu": 1}})", chat, "options.num_gpu");
    expect_refused(hi + R"(, "options": {"mirostat": 2}})", chat, "options.mirostat");
    expect_refused(hi + R"(, "options": {"num_thread": 4}})", chat, "options.num_thread");
    expect_refused(hi + R"(, "think": true})", chat, "think");
    expect_refused(hi + R"(, "logprobs": true})", chat, "logprobs");
    expect_refused(hi + R"(, "frobnicate": 1})", chat, "unknown field 'frobnicate'");
    expect_refused(hi + R"(, "keep_alive": "soon"})", chat, "keep_alive");
    expect_refused(hi + R"(, "format": "yaml"})", chat, "format");
    expect_refused(R"({"model": "m", "messages": [{"role": "user", "content": "Hi", "images": ["AAAA"]}]})", chat,
                   "images");
    expect_refused(R"({"messages": []})", chat, "'model' is required");
    expect_refused(R"({"model": "m", "prompt": "Hi", "template": "{{ .Prompt }}"})", generate, "template");
    expect_refused(R"({"model": "m", "prompt": "Hi", "context": [1, 2, 3]})", generate, "context");
    expect_refused(R"({"model": "m", "prompt": "Hi", "suffix": "end"})", generate, "suffix");
    expect_refused(R"({"model": "m", "prompt": "Hi", "raw": true, "system": "x"})", generate, "raw: true");
    expect_refused(R"({"model": "m", "prompt": "Hi", "options": {"num_predict": 0}})", generate, "num_predict");
    // Values that change nothing are accepted.
    EXPECT_NO_THROW(parse(hi + R"(, "think": false, "keep_alive": "5m", "options": {"typical_p": 1}})", chat));
    EXPECT_NO_THROW(parse(hi + R"(, "keep_alive": -1})", chat));
}

}  // namespace
}  // namespace kvstash::server
