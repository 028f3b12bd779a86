// A server with several models (`kvstash serve --models DIR`, repeated -m; docs/models.md): requests choose by
// "model", a model loads on first use and unloads when idle or for room (least recently used), an in-flight
// request keeps its model, named states belong to one model, a broken model answers a clear error while the
// others serve, and the `ollama` and `openai` Python clients list every model.
// The two models are the tiny Qwen2 fixtures (f32 and q8_0: two fingerprints), copied under new names.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "e2e/server/server_process.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class ServerModels : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_models_" + std::to_string(getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_ / "models");
        fs::copy_file(fixture_path("qwen2/qwen2_f32.gguf"), alpha());
        fs::copy_file(fixture_path("qwen2/qwen2_q8_0.gguf"), beta());
        std::ofstream(dir_ / "models" / "broken.gguf") << "GGUF this is not a model";
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path alpha() const { return dir_ / "models" / "alpha.gguf"; }
    fs::path beta() const { return dir_ / "models" / "beta.gguf"; }
    std::string models() const { return (dir_ / "models").string(); }

    fs::path dir_;
};

json completion(const std::string& model, int max_tokens = 4) {
    return {{"model", model}, {"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

json get_json(httplib::Client& client, const std::string& path) {
    auto res = client.Get(path);
    if (!res || res->status != 200) throw std::runtime_error("GET " + path + " failed");
    return json::parse(res->body);
}

// The names /api/ps lists (the loaded models).
std::vector<std::string> loaded(httplib::Client& client) {
    std::vector<std::string> names;
    const json ps = get_json(client, "/api/ps");  // (kept: a range-for over a temporary's member dangles)
    for (const json& m : ps["models"]) names.push_back(m["name"].get<std::string>());
    return names;
}

// Polls /api/ps until it lists `expected` (the reaper runs on its own clock; no timing is asserted).
bool wait_for_loaded(httplib::Client& client, const std::vector<std::string>& expected) {
    for (int i = 0; i < 600; ++i) {
        if (loaded(client) == expected) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

std::string post_text(httplib::Client& client, const json& body, int expected_status = 200) {
    auto res = client.Post("/v1/completions", body.dump(), "application/json");
    if (!res) throw std::runtime_error("no answer");
    EXPECT_EQ(res->status, expected_status) << res->body;
    return res->body;
}

TEST_F(ServerModels, ListsEveryModelAndLoadsOnFirstUse) {
    ServerProcess server({"--models", models(), "-t", "2", "--ctx", "256"});
    httplib::Client client = server.client();
    const json listed = get_json(client, "/v1/models");
    ASSERT_EQ(listed["data"].size(), 3u) << listed.dump();
    for (const json& m : listed["data"]) {
        EXPECT_FALSE(m["meta"]["loaded"].get<bool>()) << m.dump();
        EXPECT_EQ(m["status"]["value"], "unloaded");
        EXPECT_GT(m["meta"]["size"].get<uint64_t>(), 0u);
    }
    EXPECT_EQ(listed["data"][0]["id"], "alpha");
    EXPECT_EQ(listed["data"][0]["meta"]["size"].get<uint64_t>(), fs::file_size(alpha()));
    EXPECT_TRUE(loaded(client).empty());
    EXPECT_EQ(get_json(client, "/api/tags")["models"].size(), 3u);

    const json answer = json::parse(post_text(client, completion("beta")));
    EXPECT_EQ(answer["model"], "beta");
    EXPECT_EQ(loaded(client), std::vector<std::string>({"beta:latest"}));
    // Ollama's name form reaches the same model.
    auto ollama = client.Post(
        "/api/generate",
        json({{"model", "alpha:latest"}, {"prompt", "Hi"}, {"stream", false}, {"options", {{"num_predict", 2}}}})
            .dump(),
        "application/json");
    ASSERT_TRUE(ollama);
    EXPECT_EQ(ollama->status, 200) << ollama->body;
    EXPECT_EQ(loaded(client), std::vector<std::string>({"alpha:latest", "beta:latest"}));
    const json models_now = get_json(client, "/v1/models");
    for (const json& m : models_now["data"]) {
        if (m["id"] != "broken") {
            EXPECT_EQ(m["status"]["value"], "loaded") << m.dump();
        }
    }
    // kvstash ps asks the server.
    const ProcessResult ps = run_process({cli_path(), "ps", "--url", server.url()});
    EXPECT_EQ(ps.exit_code, 0) << ps.err;
    EXPECT_NE(ps.out.find("alpha:latest"), std::string::npos) << ps.out;
    EXPECT_NE(ps.out.find("beta:latest"), std::string::npos) << ps.out;
    EXPECT_EQ(ps.out.find("broken"), std::string::npos) << ps.out;
}

// The several-model flags with one model would be ignored: bad usage (2), as any ignored flag. A bad duration too.
TEST(ServerModelsCli, SeveralModelFlagsNeedSeveralModels) {
    const std::string model = fixture_path("qwen2/qwen2_f32.gguf");
    ProcessResult r = run_process({cli_path(), "serve", "-m", model, "--port", "0", "--keep-alive", "5m"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("apply to a server of several models"), std::string::npos) << r.err;
    r = run_process({cli_path(), "serve", "-m", model, "-m", model + "x", "--port", "0", "--keep-alive", "soon"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--keep-alive 'soon'"), std::string::npos) << r.err;
}

TEST(ServerModelsCli, PsWithoutAServerExits6) {
    const ProcessResult ps = run_process({cli_path(), "ps", "--url", "http://127.0.0.1:1"});
    EXPECT_EQ(ps.exit_code, 6);
    EXPECT_NE(ps.err.find("no kvstash serve answers"), std::string::npos) << ps.err;
}

// Routed to a model, a request gets what a server of that model alone gives (greedy, same prompt).
TEST_F(ServerModels, AnswersAsTheModelServedAlone) {
    std::string alone_alpha, alone_beta;
    {
        ServerProcess single({"-m", alpha().string(), "-t", "2", "--ctx", "256"});
        httplib::Client client = single.client();
        alone_alpha = json::parse(post_text(client, completion("alpha", 8)))["choices"][0]["text"];
    }
    {
        ServerProcess single({"-m", beta().string(), "-t", "2", "--ctx", "256"});
        httplib::Client client = single.client();
        alone_beta = json::parse(post_text(client, completion("beta", 8)))["choices"][0]["text"];
    }
    ServerProcess server({"-m", alpha().string(), "-m", beta().string(), "-t", "2", "--ctx", "256"});
    httplib::Client client = server.client();
    EXPECT_EQ(json::parse(post_text(client, completion("beta", 8)))["choices"][0]["text"], alone_beta);
    EXPECT_EQ(json::parse(post_text(client, completion("alpha", 8)))["choices"][0]["text"], alone_alpha);
    // No model named: the first one.
    json unnamed = completion("", 8);
    unnamed.erase("model");
    EXPECT_EQ(json::parse(post_text(client, unnamed))["choices"][0]["text"], alone_alpha);
}

TEST_F(ServerModels, UnknownAndBrokenModelsAnswerClearErrorsWhileOthersServe) {
    ServerProcess server({"--models", models(), "-t", "2", "--ctx", "256"});
    httplib::Client client = server.client();
    const json unknown = json::parse(post_text(client, completion("gamma"), 404));
    EXPECT_NE(unknown["error"]["message"].get<std::string>().find("'gamma' not found"), std::string::npos);
    EXPECT_EQ(unknown["error"]["code"], "model_not_found");
    for (int i = 0; i < 2; ++i) {  // the error is kept, not retried per request
        const json broken = json::parse(post_text(client, completion("broken"), 500));
        EXPECT_NE(broken["error"]["message"].get<std::string>().find("model 'broken' could not be loaded"),
                  std::string::npos)
            << broken.dump();
    }
    auto ollama = client.Post("/api/chat",
                              json({{"model", "broken"},
                                    {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                                    {"stream", false}})
                                  .dump(),
                              "application/json");
    ASSERT_TRUE(ollama);
    EXPECT_EQ(ollama->status, 500);
    EXPECT_NE(json::parse(ollama->body)["error"].get<std::string>().find("could not be loaded"), std::string::npos);
    post_text(client, completion("alpha"));
    const json models_now = get_json(client, "/v1/models");
    for (const json& m : models_now["data"]) {
        if (m["id"] == "broken") {
            EXPECT_EQ(m["status"]["value"], "failed");
            EXPECT_TRUE(m["meta"].contains("error"));
        }
    }
}

TEST_F(ServerModels, IdleModelsUnloadAfterKeepAlive) {
    ServerProcess server({"--models", models(), "-t", "2", "--ctx", "256", "--keep-alive", "1s"});
    httplib::Client client = server.client();
    post_text(client, completion("alpha"));
    EXPECT_TRUE(wait_for_loaded(client, {})) << "alpha still loaded";
    // Reloaded on its next request; Ollama's keep_alive -1 keeps it.
    auto res = client.Post("/api/generate",
                           json({{"model", "alpha"},
                                 {"prompt", "Hi"},
                                 {"stream", false},
                                 {"keep_alive", -1},
                                 {"options", {{"num_predict", 1}}}})
                               .dump(),
                           "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(get_json(client, "/api/ps")["models"][0]["expires_at"], "9999-12-31T23:59:59Z");
    // keep_alive 0: unloaded as soon as the request is done.
    res = client.Post("/api/generate",
                      json({{"model", "alpha"},
                            {"prompt", "Hi"},
                            {"stream", false},
                            {"keep_alive", 0},
                            {"options", {{"num_predict", 1}}}})
                          .dump(),
                      "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_TRUE(wait_for_loaded(client, {}));
}

// A budget with room for one of the two: loading one unloads the other, least recently used first, but never
// one a request is still streaming from (that request finishes; the other is answered 503 meanwhile).
TEST_F(ServerModels, MemoryBudgetUnloadsLeastRecentlyUsedButNeverCutsARequest) {
    const uint64_t budget = fs::file_size(alpha()) + fs::file_size(beta()) - 1;
    ServerProcess server({"-m", alpha().string(), "-m", beta().string(), "-t", "2", "--ctx", "2048", "--models-memory",
                          std::to_string(budget)});
    httplib::Client client = server.client();
    post_text(client, completion("alpha"));
    EXPECT_EQ(loaded(client), std::vector<std::string>({"alpha:latest"}));
    post_text(client, completion("beta"));
    EXPECT_EQ(loaded(client), std::vector<std::string>({"beta:latest"}));
    post_text(client, completion("alpha"));
    EXPECT_EQ(loaded(client), std::vector<std::string>({"alpha:latest"}));

    // 1000 tokens (the tiny model never ends early at temperature 0; ~0.1 s here): the stream is still being
    // generated when its first chunk's callback asks for beta, one loopback round trip later.
    json streamed = completion("alpha", 1000);
    streamed["stream"] = true;
    int other_status = 0;
    std::string body;
    httplib::Client other = server.client();
    httplib::Request request;
    request.method = "POST";
    request.path = "/v1/completions";
    request.body = streamed.dump();
    request.set_header("Content-Type", "application/json");
    request.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        if (other_status == 0) {  // alpha is mid-stream: beta finds no room
            auto r = other.Post("/v1/completions", completion("beta").dump(), "application/json");
            other_status = r ? r->status : -1;
        }
        body.append(data, n);
        return true;
    };
    auto res = client.send(request);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(other_status, 503);
    EXPECT_NE(body.find("data: [DONE]"), std::string::npos) << body;
    // alpha is free again once its stream's response is gone (just after the client read its end): unloaded for
    // beta. A 503 in that instant is retried.
    for (int i = 0; i < 100; ++i) {
        auto r = client.Post("/v1/completions", completion("beta").dump(), "application/json");
        ASSERT_TRUE(r);
        if (r->status != 503) {
            EXPECT_EQ(r->status, 200) << r->body;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(loaded(client), std::vector<std::string>({"beta:latest"}));
}

TEST_F(ServerModels, TwoModelsServeAtTheSameTime) {
    ServerProcess server({"--models", models(), "-t", "2", "--ctx", "256"});
    std::string answers[2];
    std::thread threads[2];
    const char* names[2] = {"alpha", "beta"};
    for (int i = 0; i < 2; ++i) {
        threads[i] = std::thread([&, i] {
            httplib::Client client = server.client();
            auto res = client.Post("/v1/completions", completion(names[i], 16).dump(), "application/json");
            answers[i] = res && res->status == 200 ? json::parse(res->body)["model"].get<std::string>() : "failed";
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(answers[0], "alpha");
    EXPECT_EQ(answers[1], "beta");
}

// Named states belong to the model that made them (a state directory each under --state-dir).
TEST_F(ServerModels, NamedStatesArePerModel) {
    const fs::path states = dir_ / "states";
    ServerProcess server({"--models", models(), "-t", "2", "--ctx", "256", "--state-dir", states.string()});
    httplib::Client client = server.client();
    auto res = client.Post("/v1/states", json({{"model", "alpha"}, {"name", "greeting"}, {"prompt", "Hello"}}).dump(),
                           "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 201) << res->body;
    EXPECT_EQ(get_json(client, "/v1/states?model=alpha")["data"].size(), 1u);
    EXPECT_EQ(get_json(client, "/v1/states?model=beta")["data"].size(), 0u);
    auto missing = client.Get("/v1/states/greeting?model=beta");
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 404);
    EXPECT_TRUE(fs::exists(states / "alpha"));
    json use = completion("alpha");
    use["prompt"] = " world";
    use["state"] = "greeting";
    post_text(client, use);
}

std::string venv_python() {
    if (const char* p = std::getenv("KVSTASH_PYTHON"); p && *p) return p;
    return source_dir() + "/.venv/bin/python";
}

TEST_F(ServerModels, OllamaAndOpenAIClientsListTheModels) {
    ASSERT_TRUE(fs::exists(venv_python())) << "no project venv at " << venv_python() << ": run scripts/setup.sh";
    ServerProcess server({"--models", models(), "-t", "2", "--ctx", "256"});
    const ProcessResult r =
        run_process({venv_python(), source_dir() + "/tests/e2e/server/models_client.py", server.url()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("checks passed"), std::string::npos) << r.out << r.err;
}

}  // namespace
}  // namespace kvstash::test
