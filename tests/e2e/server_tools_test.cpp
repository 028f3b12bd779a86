// Tool calling end to end: `kvstash serve` with the tiny random Qwen2 model (tests/fixtures/qwen2, whose
// GGUF holds Qwen 2.5's chat template), tools in the OpenAI format. A forced call (tool_choice required /
// named) always parses and its arguments validate against the tool's schema (Python `jsonschema`, several
// seeds); the official `openai` client reads the calls, streamed and not; tool_choice "auto" leaves a reply
// without a call untouched (same text as tool_choice "none"); unsupported shapes and a template without
// tools are 400s naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e/server/http_client.h"
#include "e2e/server/server_process.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
   "parameters": {"type": "object", "properties": {
     "city": {"type": "string", "maxLength": 10},
     "unit": {"enum": ["celsius", "fahrenheit"]},
     "days": {"type": "integer"}},
    "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
     "a": {"type": "integer"}, "b": {"type": "boolean"}, "tags": {"type": "array", "items": {"enum": ["x", "y"]},
     "maxItems": 2}}, "required": ["a", "b"]}}},
  {"type": "function", "function": {"name": "now", "description": "The time."}}
])");

std::string model_path() { return fixture_path("qwen2/qwen2_f32.gguf"); }

std::string venv_python() {
    if (const char* p = std::getenv("KVSTASH_PYTHON"); p && *p) return p;
    return source_dir() + "/.venv/bin/python";
}

fs::path temp_dir() {
    static const fs::path dir = [] {
        fs::path d = fs::temp_directory_path() / ("kvstash_tools_" + std::to_string(getpid()));
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

ServerProcess& server() {
    static ServerProcess s({"-m", model_path(), "--ctx", "2048", "-t", "2", "--parallel", "4"});
    return s;
}

json chat_body(const json& extra) {
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}})},
                 {"tools", kTools},
                 {"max_tokens", 300}};
    body.update(extra);
    return body;
}

// Validates each call's arguments against its tool's parameters with Python's jsonschema; "" when all pass.
std::string validate_calls(const std::vector<std::pair<std::string, std::string>>& calls) {
    json schemas = json::object();
    for (const json& t : kTools) {
        schemas[t["function"]["name"].get<std::string>()] =
            t["function"].value("parameters", json{{"type", "object"}, {"additionalProperties", false}});
    }
    json list = json::array();
    for (const auto& [name, args] : calls) list.push_back({name, args});
    const fs::path input = temp_dir() / "calls.json";
    std::ofstream(input) << json{{"schemas", schemas}, {"calls", list}}.dump();
    const ProcessResult r = run_process({venv_python(), "-c",
                                         "import json, sys, jsonschema\n"
                                         "d = json.load(open(sys.argv[1]))\n"
                                         "for name, args in d['calls']:\n"
                                         "    jsonschema.validate(json.loads(args), d['schemas'][name])\n"
                                         "print('valid', len(d['calls']))\n",
                                         input.string()});
    if (r.exit_code != 0) return "jsonschema failed (run scripts/setup.sh if it is missing):\n" + r.out + r.err;
    return "";
}

TEST(ServerTools, ForcedCallsValidateAgainstTheSchema) {
    httplib::Client client(server().url());
    client.set_read_timeout(300);
    std::vector<std::pair<std::string, std::string>> calls;
    for (int seed = 1; seed <= 4; ++seed) {
        for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "add"}}}}}) {
            const Reply r = post(
                client, "/v1/chat/completions",
                chat_body({{"seed", seed}, {"tool_choice", choice}, {"n", 2}, {"parallel_tool_calls", seed == 4}}));
            ASSERT_EQ(r.status, 200) << r.text;
            for (const json& c : r.body["choices"]) {
                ASSERT_EQ(c["finish_reason"], "tool_calls") << c.dump();
                ASSERT_TRUE(c["message"]["tool_calls"].is_array()) << c.dump();
                EXPECT_TRUE(c["message"]["content"].is_null()) << c.dump();
                for (const json& call : c["message"]["tool_calls"]) {
                    EXPECT_EQ(call["type"], "function");
                    const std::string name = call["function"]["name"];
                    if (choice.is_object()) {
                        EXPECT_EQ(name, "add");
                    }
                    calls.emplace_back(name, call["function"]["arguments"].get<std::string>());
                }
            }
        }
    }
    ASSERT_GE(calls.size(), 16u);
    EXPECT_EQ(validate_calls(calls), "");
}

TEST(ServerTools, StreamSendsTheCallsAsDeltas) {
    httplib::Client client(server().url());
    client.set_read_timeout(300);
    const json body = chat_body({{"seed", 7}, {"tool_choice", "required"}, {"parallel_tool_calls", false}});
    const Reply whole = post(client, "/v1/chat/completions", body);
    ASSERT_EQ(whole.status, 200) << whole.text;
    json streamed_body = body;
    streamed_body["stream"] = true;
    const Reply r = post(client, "/v1/chat/completions", streamed_body);
    ASSERT_EQ(r.status, 200) << r.text;
    bool done = false;
    std::string content, name, arguments, finish;
    for (const json& chunk : parse_sse(r.text, &done)) {
        for (const json& c : chunk["choices"]) {
            const json& delta = c["delta"];
            if (delta.contains("content") && delta["content"].is_string())
                content += delta["content"].get<std::string>();
            if (delta.contains("tool_calls")) {
                for (const json& call : delta["tool_calls"]) {
                    EXPECT_EQ(call["index"], 0);
                    name += call["function"].value("name", "");
                    arguments += call["function"].value("arguments", "");
                }
            }
            if (c["finish_reason"].is_string()) finish = c["finish_reason"];
        }
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(content, "");  // the call's text is not sent as content
    EXPECT_EQ(finish, "tool_calls");
    const json& call = whole.body["choices"][0]["message"]["tool_calls"][0]["function"];
    EXPECT_EQ(name, call["name"]);
    EXPECT_EQ(arguments, call["arguments"]);
}

TEST(ServerTools, AutoLeavesAReplyWithoutACallUntouched) {
    httplib::Client client(server().url());
    client.set_read_timeout(300);
    for (int seed = 1; seed <= 3; ++seed) {
        const Reply automatic = post(client, "/v1/chat/completions", chat_body({{"seed", seed}, {"max_tokens", 40}}));
        const Reply none = post(client, "/v1/chat/completions",
                                chat_body({{"seed", seed}, {"max_tokens", 40}, {"tool_choice", "none"}}));
        ASSERT_EQ(automatic.status, 200) << automatic.text;
        ASSERT_EQ(none.status, 200) << none.text;
        const json& a = automatic.body["choices"][0];
        // The random model does not write "<tool_call>": the lazy grammar never starts, nothing is masked.
        EXPECT_FALSE(a["message"].contains("tool_calls")) << a.dump();
        EXPECT_EQ(a["message"]["content"], none.body["choices"][0]["message"]["content"]);
        EXPECT_EQ(a["finish_reason"], none.body["choices"][0]["finish_reason"]);
    }
}

TEST(ServerTools, OpenAIPythonClientReadsTheCalls) {
    const std::string python = venv_python();
    ASSERT_TRUE(fs::exists(python)) << "no project venv at " << python << ": run scripts/setup.sh";
    const fs::path tools = temp_dir() / "tools.json";
    std::ofstream(tools) << kTools.dump();
    const ProcessResult r = run_process(
        {python, source_dir() + "/tests/e2e/server/openai_tools_client.py", server().url(), tools.string()});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const json out = json::parse(r.out);
    std::vector<std::pair<std::string, std::string>> calls;
    for (const json& c : out["calls"]) calls.emplace_back(c[0].get<std::string>(), c[1].get<std::string>());
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(validate_calls(calls), "");
}

TEST(ServerTools, BadRequestsNameTheField) {
    httplib::Client client(server().url());
    const auto expect_400 = [&](const json& body, const std::string& param, const std::string& path) {
        const Reply r = post(client, path, body);
        EXPECT_EQ(r.status, 400) << body.dump() << "\n" << r.text;
        EXPECT_EQ(r.body["error"]["param"], param) << r.text;
        return error_message(r);
    };
    const std::string chat = "/v1/chat/completions";
    expect_400(chat_body({{"tools", "get_weather"}}), "tools", chat);
    expect_400(chat_body({{"tools", json::array({{{"type", "code_interpreter"}}})}}), "tools", chat);
    expect_400(chat_body({{"tools", json::array({{{"type", "function"}, {"function", {{"name", "a b"}}}}})}}), "tools",
               chat);
    const std::string unsupported = expect_400(
        chat_body(
            {{"tools",
              json::array({{{"type", "function"},
                            {"function",
                             {{"name", "f"},
                              {"parameters", {{"type", "object"}, {"properties", {{"x", {{"minimum", 1}}}}}}}}}}})}}),
        "tools", chat);
    EXPECT_NE(unsupported.find("minimum"), std::string::npos) << unsupported;
    expect_400(chat_body({{"tool_choice", {{"type", "function"}, {"function", {{"name", "missing"}}}}}}), "tool_choice",
               chat);
    expect_400(chat_body({{"tool_choice", "sometimes"}}), "tool_choice", chat);
    expect_400({{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"tool_choice", "required"}},
               "tool_choice", chat);
    expect_400(chat_body({{"response_format", {{"type", "json_object"}}}}), "tools", chat);
    expect_400({{"prompt", "hi"}, {"tools", kTools}}, "tools", "/v1/completions");
    expect_400(chat_body({{"functions", json::array({{{"name", "f"}}})}}), "functions", chat);
}

TEST(ServerTools, TemplateWithoutToolsIsA400NamingIt) {
    ServerProcess plain({"-m", model_path(), "--ctx", "2048", "-t", "1", "--chat-template", "chatml"});
    httplib::Client client(plain.url());
    const Reply r = post(client, "/v1/chat/completions", chat_body(json::object()));
    EXPECT_EQ(r.status, 400) << r.text;
    EXPECT_EQ(r.body["error"]["param"], "tools") << r.text;
    const std::string message = error_message(r);
    EXPECT_NE(message.find("chatml"), std::string::npos) << message;
    // Without tools the same server answers.
    json body = chat_body({{"max_tokens", 4}});
    body.erase("tools");
    EXPECT_EQ(post(client, "/v1/chat/completions", body).status, 200);
}

}  // namespace
}  // namespace kvstash::test
