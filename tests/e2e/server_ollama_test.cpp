// Ollama's API of `kvstash serve` through the official `ollama` Python package (tests/e2e/server/ollama_client.py,
// run with the project venv's python), and tools through it on the tiny Qwen2 model, whose template has them.
// A missing client is a failure, with the command that installs it, never a silent skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "e2e/server/server_process.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string venv_python() {
    if (const char* p = std::getenv("KVSTASH_PYTHON"); p && *p) return p;
    return source_dir() + "/.venv/bin/python";
}

void require_ollama_package() {
    ASSERT_TRUE(fs::exists(venv_python())) << "no project venv at " << venv_python() << ": run scripts/setup.sh";
    const ProcessResult probe = run_process({venv_python(), "-c", "import ollama"});
    ASSERT_EQ(probe.exit_code, 0) << "the `ollama` package is missing from the venv: run scripts/setup.sh\n"
                                  << probe.err;
}

TEST(ServerOllama, OllamaPythonPackage) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    require_ollama_package();
    ServerProcess server({"-t", "2", "--ctx", "2048"});
    const ProcessResult r = run_process({venv_python(), source_dir() + "/tests/e2e/server/ollama_client.py",
                                         server.url(), fs::path(default_model_path()).stem().string()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("checks passed"), std::string::npos) << r.out << r.err;
}

// Tools reach the prompt (the tiny Qwen2 model's template renders them), and a reply's calls come back in
// Ollama's shape: message.tool_calls[i].function.{name, arguments (an object)}.
TEST(ServerOllama, ToolsOnAModelWithTools) {
    const std::string model = fixture_path("qwen2/qwen2_f32.gguf");
    ServerProcess server({"-m", model, "--ctx", "2048", "-t", "2"});
    httplib::Client client = server.client();
    const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather in a city", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
    json body = {{"model", "qwen2_f32"},
                 {"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                 {"stream", false},
                 {"options", {{"num_predict", 4}, {"seed", 1}}}};
    auto plain = client.Post("/api/chat", body.dump(), "application/json");
    ASSERT_TRUE(plain);
    ASSERT_EQ(plain->status, 200) << plain->body;
    body["tools"] = tools;
    auto with_tools = client.Post("/api/chat", body.dump(), "application/json");
    ASSERT_TRUE(with_tools);
    ASSERT_EQ(with_tools->status, 200) << with_tools->body;
    EXPECT_GT(json::parse(with_tools->body)["prompt_eval_count"].get<int>(),
              json::parse(plain->body)["prompt_eval_count"].get<int>() + 20);
    // An earlier call and its result, in Ollama's shapes, render (arguments as an object, tool_name).
    body["messages"].push_back(
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls", json::array({{{"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}})}});
    body["messages"].push_back({{"role", "tool"}, {"content", "sunny"}, {"tool_name", "get_weather"}});
    auto round_trip = client.Post("/api/chat", body.dump(), "application/json");
    ASSERT_TRUE(round_trip);
    EXPECT_EQ(round_trip->status, 200) << round_trip->body;
    // Streamed with tools: NDJSON lines, the last with done and the reply's calls (if any) in Ollama's shape.
    body["stream"] = true;
    auto streamed = client.Post("/api/chat", body.dump(), "application/json");
    ASSERT_TRUE(streamed);
    ASSERT_EQ(streamed->status, 200) << streamed->body;
    std::vector<json> lines;
    for (size_t at = 0, end; (end = streamed->body.find('\n', at)) != std::string::npos; at = end + 1) {
        lines.push_back(json::parse(streamed->body.substr(at, end - at)));
    }
    ASSERT_FALSE(lines.empty());
    EXPECT_TRUE(lines.back()["done"].get<bool>()) << streamed->body;
    for (size_t i = 0; i + 1 < lines.size(); ++i) EXPECT_FALSE(lines[i]["done"].get<bool>());
    if (lines.back()["message"].contains("tool_calls")) {
        EXPECT_TRUE(lines.back()["message"]["tool_calls"][0]["function"]["arguments"].is_object());
    }
    body["stream"] = false;
    body["tools"] = json::parse(R"([{"type": "function", "function": {"name": "bad name!"}}])");
    auto bad = client.Post("/api/chat", body.dump(), "application/json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400);
    EXPECT_TRUE(json::parse(bad->body)["error"].is_string()) << bad->body;
}

}  // namespace
}  // namespace kvstash::test
