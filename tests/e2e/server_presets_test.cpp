// Presets (docs/models.md): a NAME.preset.json in --models DIR (or serve --preset FILE) is listed as a model,
// runs on its model with its sampling defaults (the request's own fields win), puts its system prompt first
// when the messages have none, and has that system prompt prefilled at load: the very first request on it
// reuses it from the prefix cache. A bad preset file stops the server with exit 3 naming the field.
// The model is the tiny Qwen2 fixture (its own chat template; a 320-token vocabulary, so text is many tokens).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "e2e/server/server_process.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Long enough for several whole 32-token prefix-cache blocks with this vocabulary.
const std::string kSystem =
    "You are a terse assistant for a small library. Answer in one short sentence, never more, and do not "
    "greet the reader or apologise for anything at all.";

class ServerPresets : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_presets_" + std::to_string(getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "models");
        fs::copy_file(fixture_path("qwen2/qwen2_f32.gguf"), dir_ / "models" / "alpha.gguf");
        write_preset("terse", {{"model", "alpha"},
                               {"system", kSystem},
                               {"options", {{"max_tokens", 3}, {"temperature", 1.0}, {"seed", 11}}}});
    }
    void TearDown() override { fs::remove_all(dir_); }

    void write_preset(const std::string& name, const json& doc) {
        std::ofstream(dir_ / "models" / (name + ".preset.json")) << doc.dump(2);
    }
    std::string models() const { return (dir_ / "models").string(); }

    fs::path dir_;
};

json post(httplib::Client& client, const std::string& path, const json& body) {
    auto res = client.Post(path, body.dump(), "application/json");
    if (!res) throw std::runtime_error("no answer from " + path);
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body);
}

json chat(const std::string& model, const json& messages) { return {{"model", model}, {"messages", messages}}; }

json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

TEST_F(ServerPresets, ListedAsModelsWithTheirModel) {
    ServerProcess server({"--models", models(), "-t", "2", "--ctx", "1024"});
    httplib::Client client = server.client();
    auto res = client.Get("/v1/models");
    ASSERT_TRUE(res && res->status == 200);
    const json listed = json::parse(res->body);
    ASSERT_EQ(listed["data"].size(), 2u) << listed.dump();
    EXPECT_EQ(listed["data"][1]["id"], "terse");
    EXPECT_EQ(listed["data"][1]["meta"]["preset"]["model"], "alpha");
    EXPECT_FALSE(listed["data"][0]["meta"].contains("preset"));
    res = client.Get("/api/tags");
    ASSERT_TRUE(res && res->status == 200);
    const json tags = json::parse(res->body);
    ASSERT_EQ(tags["models"].size(), 2u) << tags.dump();
    EXPECT_EQ(tags["models"][1]["name"], "terse:latest");
    EXPECT_EQ(tags["models"][1]["details"]["parent_model"], "alpha:latest");
}

// The first request on the preset: its defaults (3 tokens), its system prompt (counted in the prompt), and
// that system prompt already in the prefix cache (prefilled at load).
TEST_F(ServerPresets, FirstRequestIsWarmAndUsesTheDefaults) {
    ServerProcess server({"--models", models(), "-t", "2", "--ctx", "1024"});
    httplib::Client client = server.client();
    const json first = post(client, "/v1/chat/completions", chat("terse", json::array({user("Hi")})));
    EXPECT_EQ(first["usage"]["completion_tokens"], 3) << first.dump();
    EXPECT_GT(first["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << first.dump();

    // The same conversation with the system message given explicitly is the same prompt; with a short
    // system message of its own (the preset's is then not inserted) it is shorter.
    const json explicit_system =
        post(client, "/v1/chat/completions",
             chat("terse", json::array({json{{"role", "system"}, {"content", kSystem}}, user("Hi")})));
    EXPECT_EQ(explicit_system["usage"]["prompt_tokens"], first["usage"]["prompt_tokens"]);
    const json own_system =
        post(client, "/v1/chat/completions",
             chat("terse", json::array({json{{"role", "system"}, {"content", "Be kind."}}, user("Hi")})));
    EXPECT_LT(own_system["usage"]["prompt_tokens"].get<int64_t>(), first["usage"]["prompt_tokens"].get<int64_t>());

    // The model itself has none of the preset's defaults: its own default length, no preset system prompt.
    json plain_body = chat("alpha", json::array({user("Hi")}));
    plain_body["max_tokens"] = 5;
    const json plain = post(client, "/v1/chat/completions", plain_body);
    EXPECT_EQ(plain["usage"]["completion_tokens"], 5) << plain.dump();
    EXPECT_LT(plain["usage"]["prompt_tokens"].get<int64_t>(), first["usage"]["prompt_tokens"].get<int64_t>());
}

// The preset's seed (with temperature 1) makes answers repeat; the request's own fields override the preset.
TEST_F(ServerPresets, SeedRepeatsAndRequestFieldsWin) {
    ServerProcess server({"--models", models(), "-t", "2", "--ctx", "1024"});
    httplib::Client client = server.client();
    const json body = chat("terse", json::array({user("Tell me a story")}));
    const json a = post(client, "/v1/chat/completions", body);
    const json b = post(client, "/v1/chat/completions", body);
    EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
    json longer = body;
    longer["max_tokens"] = 6;
    const json c = post(client, "/v1/chat/completions", longer);
    EXPECT_EQ(c["usage"]["completion_tokens"], 6) << c.dump();

    // Ollama's /api/chat gets the same defaults (num_predict from max_tokens).
    const json ollama =
        post(client, "/api/chat", {{"model", "terse"}, {"messages", json::array({user("Hi")})}, {"stream", false}});
    EXPECT_EQ(ollama["eval_count"], 3) << ollama.dump();
}

TEST_F(ServerPresets, PresetFlagAndBadFilesNameTheField) {
    const std::string model = fixture_path("qwen2/qwen2_f32.gguf");
    const fs::path bad = dir_ / "hot.preset.json";
    std::ofstream(bad) << R"({"model": "qwen2_f32", "options": {"temperature": "hot"}})";
    ProcessResult r = run_process({cli_path(), "serve", "-m", model, "--preset", bad.string(), "--port", "0"});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("field 'options.temperature' must be a number"), std::string::npos) << r.err;

    std::ofstream(bad) << R"({"model": "nowhere", "system": "x"})";
    r = run_process({cli_path(), "serve", "-m", model, "--preset", bad.string(), "--port", "0"});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("field 'model' names 'nowhere'"), std::string::npos) << r.err;

    std::ofstream(bad) << R"({"model": "qwen2_f32", "temprature": 1})";
    r = run_process({cli_path(), "serve", "-m", model, "--preset", bad.string(), "--port", "0"});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("field 'temprature' is not a preset field"), std::string::npos) << r.err;

    // A good one given with --preset serves next to the model it names.
    std::ofstream(bad) << json{{"model", "qwen2_f32"}, {"template", "chatml"}, {"options", {{"max_tokens", 2}}}}.dump();
    ServerProcess server({"-m", model, "--preset", bad.string(), "-t", "2", "--ctx", "512"});
    httplib::Client client = server.client();
    const json answer = post(client, "/v1/chat/completions", chat("hot", json::array({user("Hi")})));
    EXPECT_EQ(answer["usage"]["completion_tokens"], 2) << answer.dump();
}

}  // namespace
}  // namespace kvstash::test
