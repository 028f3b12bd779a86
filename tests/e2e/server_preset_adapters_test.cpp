// Adapters in presets (docs/models.md#presets): a preset naming a LoRA runs its requests under it, through the
// real `kvstash serve --models DIR`, with exactly the bits of the same model and LoRA run another way — the
// CLI (`kvstash generate --lora`) and a one-model server (`serve --lora NAME=FILE`, "adapter": NAME) — its
// system prompt prefilled under the LoRA (the first request already reuses it), while its base model's
// requests stay those of the model alone. The adapters are another computation: the preset's cache blocks in
// a shared disk tier and its named states are never the base model's.
// Fixtures: tests/fixtures/adapters (base.gguf, lora.gguf; made by tests/reference/make_adapters.py).
#include <gtest/gtest.h>
#include <unistd.h>

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

// Several whole 32-token prefix-cache blocks with the fixture's small vocabulary.
const std::string kSystem =
    "You are a terse assistant for a small library. Answer in one short sentence, never more, and do not "
    "greet the reader or apologise for anything at all.";
const std::string kUser = "She had been forced into prudence in her youth";
constexpr int kTokens = 12;

class ServerPresetAdapters : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_preset_adapters_" + std::to_string(getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "models");
        fs::copy_file(fixture_path("adapters/base.gguf"), dir_ / "models" / "base.gguf");
        // The preset's adapter path is relative: taken from the preset file's directory. In a subdirectory, as
        // a GGUF directly in --models DIR is served as a model.
        fs::create_directories(dir_ / "models" / "adapters");
        fs::copy_file(fixture_path("adapters/lora.gguf"), dir_ / "models" / "adapters" / "style.gguf");
        write_preset("styled", {{"model", "base"},
                                {"system", kSystem},
                                {"template", "chatml"},
                                {"adapters", {{{"lora", "adapters/style.gguf"}}}}});
        // Another adapter set on the same model and system prompt: a control vector (absolute path).
        write_preset("moody",
                     {{"model", "base"},
                      {"system", kSystem},
                      {"template", "chatml"},
                      {"adapters", {{{"control_vector", fixture_path("adapters/cvec.gguf")}, {"scale", 0.8}}}}});
        // A LoRA made for another model: that preset fails to load, the others serve.
        write_preset("broken", {{"model", "base"}, {"adapters", {fixture_path("adapters/lora_wrong_shape.gguf")}}});
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

json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }
json system_message() { return {{"role", "system"}, {"content", kSystem}}; }

// A greedy chat request with its tokens' log-probabilities (and bytes).
json greedy_chat(const std::string& model, const json& messages) {
    return {{"model", model},   {"messages", messages}, {"max_tokens", kTokens},
            {"temperature", 0}, {"logprobs", true},     {"top_logprobs", 3}};
}

// The answer's bytes, token by token (the model's pieces need not be UTF-8 on their own).
std::string answer_bytes(const json& answer) {
    std::string out;
    for (const json& token : answer["choices"][0]["logprobs"]["content"]) {
        for (const json& b : token["bytes"]) out.push_back(static_cast<char>(b.get<int>()));
    }
    return out;
}

// `kvstash generate --chat` with the preset's system prompt and template, greedy, optionally under the LoRA.
std::string cli_answer(bool with_lora) {
    std::vector<std::string> args = {"generate",
                                     "-m",
                                     fixture_path("adapters/base.gguf"),
                                     "--chat",
                                     "--system",
                                     kSystem,
                                     "--chat-template",
                                     "chatml",
                                     "-p",
                                     kUser,
                                     "-n",
                                     std::to_string(kTokens),
                                     "--temp",
                                     "0",
                                     "-t",
                                     "2"};
    if (with_lora) {
        args.push_back("--lora");
        args.push_back(fixture_path("adapters/lora.gguf"));
    }
    const ProcessResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string out = r.out;
    if (!out.empty() && out.back() == '\n') out.pop_back();  // the CLI ends its output with a newline
    return out;
}

// The preset's first request: warm (its system prompt prefilled at load, under the LoRA), and bit for bit the
// same tokens and log-probabilities as the one-model server with that LoRA named, and the same bytes as the
// CLI with --lora. The base model beside it answers as the model alone (the CLI without --lora), and differently;
// a preset with a control vector instead answers as that server with the control vector named.
TEST_F(ServerPresetAdapters, AnswersAsTheModelWithItsLoraAndLeavesTheBaseAlone) {
    const std::string with_lora_cli = cli_answer(true);
    const std::string alone_cli = cli_answer(false);
    ASSERT_NE(with_lora_cli, alone_cli) << "the LoRA must change the greedy answer for this test to tell them apart";

    json preset_answer;
    json moody_answer;
    json base_answer;
    {
        // One disk tier for both: the base model's blocks are written there first, and the preset (loaded by its
        // first request, after them) must not take them for its own (its keys carry the LoRA's fingerprint).
        ServerProcess server({"--models", models(), "--chat-template", "chatml", "--cache-dir",
                              (dir_ / "cache").string(), "--state-dir", (dir_ / "states").string(), "-t", "2", "--ctx",
                              "512"});
        httplib::Client client = server.client();
        base_answer =
            post(client, "/v1/chat/completions", greedy_chat("base", json::array({system_message(), user(kUser)})));
        preset_answer = post(client, "/v1/chat/completions", greedy_chat("styled", json::array({user(kUser)})));
        EXPECT_GT(preset_answer["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0)
            << "the preset's system prompt was not prefilled: " << preset_answer.dump();
        // Loaded after the LoRA's preset wrote its blocks to the shared disk tier: its own still.
        moody_answer = post(client, "/v1/chat/completions", greedy_chat("moody", json::array({user(kUser)})));
        EXPECT_GT(moody_answer["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0)
            << moody_answer.dump();
        auto broken = client.Post("/v1/chat/completions", greedy_chat("broken", json::array({user(kUser)})).dump(),
                                  "application/json");
        ASSERT_TRUE(broken);
        EXPECT_EQ(broken->status, 500) << broken->body;
        EXPECT_NE(broken->body.find("could not be loaded"), std::string::npos) << broken->body;
        // Again on the base model: still the model alone.
        const json base_again =
            post(client, "/v1/chat/completions", greedy_chat("base", json::array({system_message(), user(kUser)})));
        EXPECT_EQ(base_again["choices"][0]["logprobs"], base_answer["choices"][0]["logprobs"]);

        // Ollama's /api/show gives the preset's LoRA as a Modelfile's ADAPTER line; the base model has none.
        auto res = client.Post("/api/show", R"({"model": "styled"})", "application/json");
        ASSERT_TRUE(res);
        ASSERT_EQ(res->status, 200) << res->body;
        const std::string modelfile = json::parse(res->body)["modelfile"];
        EXPECT_NE(modelfile.find("ADAPTER " + (dir_ / "models" / "adapters" / "style.gguf").string() + "\n"),
                  std::string::npos)
            << modelfile;
        res = client.Post("/api/show", R"({"model": "base"})", "application/json");
        ASSERT_TRUE(res);
        EXPECT_EQ(json::parse(res->body)["modelfile"].get<std::string>().find("ADAPTER"), std::string::npos);

        // A request naming another adapter on the preset is refused (its one set is its own).
        json other = greedy_chat("styled", json::array({user(kUser)}));
        other["adapter"] = "mood";
        res = client.Post("/v1/chat/completions", other.dump(), "application/json");
        ASSERT_TRUE(res);
        EXPECT_EQ(res->status, 400) << res->body;

        // A named state made on the preset is the preset's: continued there under the LoRA, unknown to the base.
        res = client.Post("/v1/states", json{{"model", "styled"}, {"name", "opening"}, {"prompt", kUser}}.dump(),
                          "application/json");
        ASSERT_TRUE(res);
        ASSERT_EQ(res->status, 201) << res->body;
        json cont = {{"model", "styled"}, {"state", "opening"}, {"prompt", " and"}, {"max_tokens", 2}};
        post(client, "/v1/completions", cont);
        cont["model"] = "base";
        res = client.Post("/v1/completions", cont.dump(), "application/json");
        ASSERT_TRUE(res);
        EXPECT_EQ(res->status, 404) << res->body;
    }
    EXPECT_EQ(answer_bytes(preset_answer), with_lora_cli);
    EXPECT_EQ(answer_bytes(base_answer), alone_cli);

    // The one-model server, --lora style=FILE, "adapter": "style", the system message given: the same bits.
    ServerProcess one({"-m", fixture_path("adapters/base.gguf"), "--lora",
                       "style=" + fixture_path("adapters/lora.gguf"), "--control-vector",
                       "mood=" + fixture_path("adapters/cvec.gguf") + ":0.8", "--chat-template", "chatml", "-t", "2",
                       "--ctx", "512"});
    httplib::Client client = one.client();
    json body = greedy_chat("base", json::array({system_message(), user(kUser)}));
    body["adapter"] = "style";
    const json reference = post(client, "/v1/chat/completions", body);
    EXPECT_EQ(preset_answer["choices"][0]["logprobs"], reference["choices"][0]["logprobs"]);
    EXPECT_EQ(preset_answer["usage"]["prompt_tokens"], reference["usage"]["prompt_tokens"]);
    body["adapter"] = "mood";
    const json mood_reference = post(client, "/v1/chat/completions", body);
    EXPECT_EQ(moody_answer["choices"][0]["logprobs"], mood_reference["choices"][0]["logprobs"]);
    EXPECT_NE(moody_answer["choices"][0]["logprobs"], preset_answer["choices"][0]["logprobs"]);
}

}  // namespace
}  // namespace kvstash::test
