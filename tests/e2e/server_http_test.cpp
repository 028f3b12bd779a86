// `kvstash serve` end to end over real HTTP (cpp-httplib's client): every endpoint, every error status,
// SSE parsing, n > 1, named states (create, continue, download, upload, delete, persistence), batching
// invariance (concurrent requests answer exactly what each alone does) and cancellation on disconnect.
// Expected texts come from an independent path: `kvstash generate` (the library's generate() loop), run
// through the CLI with the same parameters.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>

#include "e2e/server/server_process.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

// The value of an unlabelled Prometheus sample "NAME VALUE" on a line of its own; -1 if absent.
// (Plain parsing rather than std::regex: GCC 12 reports a -Wmaybe-uninitialized false positive inside
// <regex> under optimisation, which -Werror turns into a build failure.)
double metric_value(const std::string& metrics, const std::string& name) {
    const std::string key = "\n" + name + " ";
    const size_t at = ("\n" + metrics).find(key);
    if (at == std::string::npos) return -1.0;
    return std::strtod(metrics.c_str() + at + key.size() - 1, nullptr);
}

using nlohmann::json;
namespace fs = std::filesystem;

// One server for most tests (started on first use, stopped at exit).
ServerProcess& shared_server() {
    static ServerProcess server({"-t", "2", "--parallel", "8"});
    return server;
}

struct Reply {
    int status = 0;
    json body;
    std::string text;
    httplib::Headers headers;
};

Reply post(httplib::Client& client, const std::string& path, const std::string& body,
           const httplib::Headers& headers = {}) {
    auto res = client.Post(path, headers, body, "application/json");
    Reply r;
    if (!res) return r;
    r.status = res->status;
    r.text = res->body;
    r.headers = res->headers;
    r.body = json::parse(res->body, nullptr, false);
    return r;
}
Reply post(httplib::Client& client, const std::string& path, const json& body) {
    return post(client, path, body.dump());
}

Reply get(httplib::Client& client, const std::string& path) {
    auto res = client.Get(path);
    Reply r;
    if (!res) return r;
    r.status = res->status;
    r.text = res->body;
    r.body = json::parse(res->body, nullptr, false);
    return r;
}

// Checks the OpenAI error shape and returns the message.
std::string error_message(const Reply& r) {
    EXPECT_TRUE(r.body.is_object() && r.body.contains("error")) << r.text;
    if (!r.body.is_object() || !r.body.contains("error")) return {};
    const json& e = r.body["error"];
    EXPECT_TRUE(e.contains("message") && e.contains("type") && e.contains("param") && e.contains("code")) << r.text;
    return e.value("message", "");
}

// Parses an SSE body: the JSON of every "data:" event, and whether it ended with [DONE].
std::vector<json> parse_sse(const std::string& body, bool* done) {
    std::vector<json> events;
    *done = false;
    size_t at = 0;
    while (at < body.size()) {
        size_t end = body.find("\n\n", at);
        if (end == std::string::npos) break;
        const std::string event = body.substr(at, end - at);
        at = end + 2;
        EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
        const std::string data = event.substr(6);
        if (data == "[DONE]") {
            *done = true;
            EXPECT_EQ(at, body.size()) << "data after [DONE]";
            break;
        }
        events.push_back(json::parse(data));
    }
    return events;
}

std::string generate_cli(const std::vector<std::string>& extra) {
    std::vector<std::string> args{"generate", "-t", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    const ProcessResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out.substr(0, r.out.size() - 1);  // the CLI ends the text with a newline
}

class ServerHttp : public ::testing::Test {
protected:
    void SetUp() override {
        KVSTASH_REQUIRE_DEFAULT_MODEL();
        client_.emplace(shared_server().client());
    }
    httplib::Client& client() { return *client_; }
    std::optional<httplib::Client> client_;
};

TEST_F(ServerHttp, HealthModelsMetrics) {
    Reply health = get(client(), "/health");
    EXPECT_EQ(health.status, 200);
    EXPECT_EQ(health.body["status"], "ok");
    Reply models = get(client(), "/v1/models");
    ASSERT_EQ(models.status, 200);
    EXPECT_EQ(models.body["object"], "list");
    ASSERT_EQ(models.body["data"].size(), 1u);
    EXPECT_EQ(models.body["data"][0]["id"], "SmolLM2-135M-Instruct.Q4_1");
    Reply metrics = get(client(), "/metrics");
    ASSERT_EQ(metrics.status, 200);
    for (const char* name :
         {"kvstash_requests_total", "kvstash_prompt_tokens_computed_total", "kvstash_prompt_tokens_reused_total",
          "kvstash_prompt_cache_hit_ratio", "kvstash_decode_tokens_per_second", "kvstash_queue_depth",
          "kvstash_active_sequences", "kvstash_cache_bytes{tier=\"ram\"}", "kvstash_cache_bytes{tier=\"disk\"}"}) {
        EXPECT_NE(metrics.text.find(name), std::string::npos) << name;
    }
}

TEST_F(ServerHttp, GreedyCompletionMatchesGenerate) {
    const std::string expected = generate_cli({"-p", "The capital of France is", "--temp", "0", "-n", "16"});
    Reply r = post(client(), "/v1/completions",
                   json{{"prompt", "The capital of France is"}, {"max_tokens", 16}, {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.text;
    EXPECT_EQ(r.body["object"], "text_completion");
    EXPECT_EQ(r.body["choices"][0]["text"], expected);
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], 5);  // "504 3575 282 4649 314" (tests/e2e/text_cli_test.cpp)
    EXPECT_EQ(r.body["usage"]["total_tokens"],
              r.body["usage"]["prompt_tokens"].get<int>() + r.body["usage"]["completion_tokens"].get<int>());
    EXPECT_TRUE(r.body["usage"]["prompt_tokens_details"].contains("cached_tokens"));
}

TEST_F(ServerHttp, SeededCompletionMatchesGenerate) {
    // The CLI's sampling defaults (top-k 40, top-p 0.95, min-p 0.05) passed explicitly.
    const std::string expected = generate_cli({"-p", "Once upon a time", "--temp", "1.0", "--seed", "11", "-n", "24"});
    Reply r = post(client(), "/v1/completions",
                   json{{"prompt", "Once upon a time"},
                        {"max_tokens", 24},
                        {"temperature", 1.0},
                        {"seed", 11},
                        {"top_k", 40},
                        {"top_p", 0.95},
                        {"min_p", 0.05}});
    ASSERT_EQ(r.status, 200) << r.text;
    EXPECT_EQ(r.body["choices"][0]["text"], expected);
}

TEST_F(ServerHttp, ChatCompletionAndStopStrings) {
    const std::string expected =
        generate_cli({"--chat", "-p", "What is the capital of France?", "--temp", "0", "-n", "24"});
    Reply r = post(client(), "/v1/chat/completions",
                   json{{"messages", {{{"role", "user"}, {"content", "What is the capital of France?"}}}},
                        {"max_tokens", 24},
                        {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.text;
    EXPECT_EQ(r.body["object"], "chat.completion");
    EXPECT_EQ(r.body["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(r.body["choices"][0]["message"]["content"], expected);
    EXPECT_NE(expected.find("Paris"), std::string::npos);
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");  // <|im_end|>

    Reply s = post(
        client(), "/v1/completions",
        json{{"prompt", "The capital of France is"}, {"max_tokens", 16}, {"temperature", 0}, {"stop", {".", "xyz"}}});
    ASSERT_EQ(s.status, 200) << s.text;
    EXPECT_EQ(s.body["choices"][0]["text"], " Paris");  // as `kvstash generate --stop .` (text_cli_test)
    EXPECT_EQ(s.body["choices"][0]["finish_reason"], "stop");
    Reply l = post(client(), "/v1/completions",
                   json{{"prompt", "The capital of France is"}, {"max_tokens", 3}, {"temperature", 0}});
    EXPECT_EQ(l.body["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(l.body["usage"]["completion_tokens"], 3);
}

TEST_F(ServerHttp, StreamingEqualsNonStreaming) {
    for (bool chat : {false, true}) {
        json body = {{"max_tokens", 20}, {"temperature", 0.9}, {"seed", 5}};
        if (chat)
            body["messages"] = {{{"role", "user"}, {"content", "Tell me about cats."}}};
        else
            body["prompt"] = "Cats are";
        const char* path = chat ? "/v1/chat/completions" : "/v1/completions";
        Reply whole = post(client(), path, body);
        ASSERT_EQ(whole.status, 200) << whole.text;
        body["stream"] = true;
        body["stream_options"] = {{"include_usage", true}};
        Reply streamed = post(client(), path, body);
        ASSERT_EQ(streamed.status, 200) << streamed.text;
        bool done = false;
        const std::vector<json> events = parse_sse(streamed.text, &done);
        EXPECT_TRUE(done);
        ASSERT_GE(events.size(), 2u);
        std::string text, finish;
        for (const json& e : events) {
            if (e["choices"].empty()) {
                // cached_tokens differs: the second request reuses the first one's prompt blocks.
                EXPECT_EQ(e["usage"]["prompt_tokens"], whole.body["usage"]["prompt_tokens"]) << "usage chunk";
                EXPECT_EQ(e["usage"]["completion_tokens"], whole.body["usage"]["completion_tokens"]) << "usage chunk";
                continue;
            }
            const json& c = e["choices"][0];
            text += chat ? c["delta"].value("content", "") : c.value("text", "");
            if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
        }
        if (chat) {
            EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
        }
        const std::string expected =
            chat ? whole.body["choices"][0]["message"]["content"] : whole.body["choices"][0]["text"];
        EXPECT_EQ(text, expected) << (chat ? "chat" : "completion");
        EXPECT_EQ(finish, whole.body["choices"][0]["finish_reason"]);
    }
}

TEST_F(ServerHttp, LogprobsAreLogSoftmaxOfTheModel) {
    Reply r =
        post(client(), "/v1/completions",
             json{{"prompt", "The capital of France is"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 3}});
    ASSERT_EQ(r.status, 200) << r.text;
    const json& lp = r.body["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 4u);
    std::string joined;
    for (size_t i = 0; i < 4; ++i) {
        joined += lp["tokens"][i].get<std::string>();
        EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
        ASSERT_EQ(lp["top_logprobs"][i].size(), 3u);
        // Greedy: the chosen token is the most likely one.
        double best = -1e300;
        for (const auto& [tok, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
        EXPECT_DOUBLE_EQ(lp["token_logprobs"][i].get<double>(), best);
    }
    EXPECT_EQ(joined, r.body["choices"][0]["text"]);
    Reply chat = post(client(), "/v1/chat/completions",
                      json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                           {"max_tokens", 3},
                           {"temperature", 0},
                           {"logprobs", true},
                           {"top_logprobs", 2}});
    ASSERT_EQ(chat.status, 200) << chat.text;
    ASSERT_EQ(chat.body["choices"][0]["logprobs"]["content"].size(), 3u);
    EXPECT_EQ(chat.body["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
}

TEST_F(ServerHttp, ChoicesAreSeedPlusIndex) {
    json body = {{"prompt", "My favourite food is"}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 100}, {"n", 3}};
    Reply many = post(client(), "/v1/completions", body);
    ASSERT_EQ(many.status, 200) << many.text;
    ASSERT_EQ(many.body["choices"].size(), 3u);
    body["n"] = 1;
    for (int i = 0; i < 3; ++i) {
        body["seed"] = 100 + i;
        Reply one = post(client(), "/v1/completions", body);
        EXPECT_EQ(many.body["choices"][i]["text"], one.body["choices"][0]["text"]) << "choice " << i;
        EXPECT_EQ(many.body["choices"][i]["index"], i);
    }
}

TEST_F(ServerHttp, ConcurrentRequestsAnswerAsAlone) {
    // Different prompts, lengths, greedy and seeded, with logprobs: served alone one after the other,
    // then all at once (continuous batching); every answer must be identical, logprobs included.
    std::vector<json> bodies;
    const char* prompts[] = {"The capital of France is", "Once upon a time, in a land far away,",
                             "def fibonacci(n):",        "List three colours:",
                             "The quick brown fox",      "In 1969, the first"};
    for (int i = 0; i < 6; ++i) {
        json b = {{"prompt", prompts[i]}, {"max_tokens", 10 + 4 * i}, {"logprobs", 2}};
        if (i % 2)
            b.update({{"temperature", 0.8}, {"seed", 1000 + i}});
        else
            b["temperature"] = 0;
        bodies.push_back(b);
    }
    std::vector<json> alone;
    for (const json& b : bodies) {
        Reply r = post(client(), "/v1/completions", b);
        ASSERT_EQ(r.status, 200) << r.text;
        alone.push_back(r.body["choices"][0]);
    }
    std::vector<std::future<Reply>> together;
    for (const json& b : bodies) {
        together.push_back(std::async(std::launch::async, [&b] {
            httplib::Client c = shared_server().client();
            return post(c, "/v1/completions", b);
        }));
    }
    for (size_t i = 0; i < bodies.size(); ++i) {
        Reply r = together[i].get();
        ASSERT_EQ(r.status, 200) << r.text;
        EXPECT_EQ(r.body["choices"][0]["text"], alone[i]["text"]) << i;
        EXPECT_EQ(r.body["choices"][0]["logprobs"].dump(), alone[i]["logprobs"].dump()) << i;  // bitwise, as printed
    }
    // They did share steps: more sequences than steps over this test would not prove it, but a mean batch
    // above 1 since start does.
    const std::string metrics = get(client(), "/metrics").text;
    const double steps = metric_value(metrics, "kvstash_batch_steps_total");
    const double sequences = metric_value(metrics, "kvstash_batch_sequences_total");
    ASSERT_GE(steps, 0.0) << metrics;
    ASSERT_GE(sequences, 0.0) << metrics;
    EXPECT_GT(sequences, steps);
}

TEST_F(ServerHttp, PrefixCacheReusesALongPrompt) {
    std::string system = "You are a careful assistant. ";
    for (int i = 0; i < 12; ++i) system += "Always answer in full sentences and check every fact twice. ";
    json body = {
        {"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "Name a fruit."}}}},
        {"max_tokens", 8},
        {"temperature", 0}};
    Reply first = post(client(), "/v1/chat/completions", body);
    ASSERT_EQ(first.status, 200) << first.text;
    body["messages"][1]["content"] = "Name a vegetable.";
    Reply second = post(client(), "/v1/chat/completions", body);
    ASSERT_EQ(second.status, 200) << second.text;
    const int prompt = second.body["usage"]["prompt_tokens"];
    const int cached = second.body["usage"]["prompt_tokens_details"]["cached_tokens"];
    EXPECT_GT(prompt, 128);
    EXPECT_GE(cached, 128) << "the shared system prompt (full 32-token blocks) should come from the cache";
    EXPECT_LT(cached, prompt);
}

TEST_F(ServerHttp, BadRequestsAreOpenAIErrors) {
    struct Case {
        std::string path, body, param;
    };
    const std::vector<Case> cases = {
        {"/v1/completions", "{not json", ""},
        {"/v1/completions", "[1, 2]", ""},
        {"/v1/completions", R"({"prompt": 42})", "prompt"},
        {"/v1/completions", R"({"prompt": "hi", "max_tokens": "ten"})", "max_tokens"},
        {"/v1/completions", R"({"prompt": "hi", "max_tokens": 0})", "max_tokens"},
        {"/v1/completions", R"({"prompt": "hi", "max_tokens": 9000})", "max_tokens"},
        {"/v1/completions", R"({"prompt": "hi", "temperature": -1})", "temperature"},
        {"/v1/completions", R"({"prompt": "hi", "top_p": 2})", "top_p"},
        {"/v1/completions", R"({"prompt": "hi", "stop": [1]})", "stop"},
        {"/v1/completions", R"({"prompt": "hi", "stop": ""})", "stop"},
        {"/v1/completions", R"({"prompt": "hi", "n": 99})", "n"},
        {"/v1/completions", R"({"prompt": "hi", "stream": "yes"})", "stream"},
        {"/v1/completions", R"({"prompt": "hi", "logprobs": 50})", "logprobs"},
        {"/v1/completions", R"({"prompt": "hi", "logit_bias": {"99999999": 1}})", "logit_bias"},
        {"/v1/completions", R"({"prompt": "hi", "echo": true})", "echo"},
        {"/v1/completions", R"({"max_tokens": 3})", "prompt"},
        {"/v1/chat/completions", R"({"messages": []})", "messages"},
        {"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages"},
        {"/v1/chat/completions", R"({"messages": "hello"})", "messages"},
        {"/v1/states", R"({"name": "../etc", "prompt": "x"})", "name"},
        {"/v1/states", R"({"name": "ok"})", "prompt"},
    };
    for (const Case& c : cases) {
        Reply r = post(client(), c.path, c.body);
        EXPECT_EQ(r.status, 400) << c.body << " -> " << r.text;
        EXPECT_FALSE(error_message(r).empty()) << c.body;
        EXPECT_EQ(r.body["error"]["type"], "invalid_request_error") << c.body;
        if (!c.param.empty()) {
            EXPECT_EQ(r.body["error"]["param"], c.param) << c.body;
        }
    }
    // A prompt longer than the context.
    std::string longer;
    for (int i = 0; i < 9000; ++i) longer += " a";
    Reply too_long = post(client(), "/v1/completions", json{{"prompt", longer}});
    EXPECT_EQ(too_long.status, 400);
    EXPECT_EQ(too_long.body["error"]["code"], "context_length_exceeded") << too_long.text;

    Reply unknown_route = get(client(), "/v1/nothing");
    EXPECT_EQ(unknown_route.status, 404);
    EXPECT_FALSE(error_message(unknown_route).empty());
}

TEST_F(ServerHttp, NamedStatesLifecycle) {
    const json system = {{"role", "system"},
                         {"content", "You are a geography assistant. Answer in one short sentence."}};
    const json user = {{"role", "user"}, {"content", "What is the capital of Italy?"}};
    Reply created = post(client(), "/v1/states", json{{"name", "geo"}, {"messages", {system}}});
    ASSERT_EQ(created.status, 201) << created.text;
    EXPECT_EQ(created.body["name"], "geo");
    const int state_tokens = created.body["tokens"];
    EXPECT_GT(state_tokens, 5);
    EXPECT_GT(created.body["bytes"].get<int64_t>(), 0);
    EXPECT_EQ(created.body["model"], "SmolLM2-135M-Instruct.Q4_1");

    Reply list = get(client(), "/v1/states");
    ASSERT_EQ(list.status, 200);
    bool listed = false;
    for (const json& s : list.body["data"]) listed |= s["name"] == "geo";
    EXPECT_TRUE(listed) << list.text;
    Reply info = get(client(), "/v1/states/geo");
    ASSERT_EQ(info.status, 200);
    EXPECT_EQ(info.body["tokens"], state_tokens);

    // Continuing from the state answers exactly what the whole conversation does from scratch.
    const json chat = {{"messages", {system, user}}, {"max_tokens", 24}, {"temperature", 0}};
    Reply plain = post(client(), "/v1/chat/completions", chat);
    json from_state_body = chat;
    from_state_body["state"] = "geo";
    Reply from_state = post(client(), "/v1/chat/completions", from_state_body);
    ASSERT_EQ(from_state.status, 200) << from_state.text;
    EXPECT_EQ(from_state.body["choices"][0]["message"]["content"], plain.body["choices"][0]["message"]["content"]);
    EXPECT_GE(from_state.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), state_tokens);

    // Completions on a state: the prompt is appended (no BOS).
    Reply cont = post(client(), "/v1/completions",
                      json{{"state", "geo"}, {"prompt", "<|im_start|>user\nHi<|im_end|>\n"}, {"max_tokens", 4}});
    EXPECT_EQ(cont.status, 200) << cont.text;
    EXPECT_EQ(cont.body["usage"]["prompt_tokens_details"]["cached_tokens"], state_tokens);

    // Download, upload under another name, continue from the upload: the same answer.
    auto file = client().Get("/v1/states/geo/file");
    ASSERT_TRUE(file);
    ASSERT_EQ(file->status, 200);
    EXPECT_EQ(file->body.substr(0, 8), std::string("KVSTATE\0", 8));  // docs/state-format.md: the magic
    auto put = client().Put("/v1/states/geo-copy/file", file->body, "application/octet-stream");
    ASSERT_TRUE(put);
    ASSERT_EQ(put->status, 201) << put->body;
    from_state_body["state"] = "geo-copy";
    Reply from_upload = post(client(), "/v1/chat/completions", from_state_body);
    ASSERT_EQ(from_upload.status, 200) << from_upload.text;
    EXPECT_EQ(from_upload.body["choices"][0]["message"]["content"], plain.body["choices"][0]["message"]["content"]);

    // Corrupt and truncated uploads are refused with the loader's message; nothing is stored.
    std::string corrupt = file->body;
    corrupt[corrupt.size() / 2] ^= 0x5A;
    auto bad = client().Put("/v1/states/broken/file", corrupt, "application/octet-stream");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << bad->body;
    EXPECT_NE(bad->body.find("checksum"), std::string::npos) << bad->body;
    auto truncated = client().Put("/v1/states/broken/file", file->body.substr(0, 100), "application/octet-stream");
    ASSERT_TRUE(truncated);
    EXPECT_EQ(truncated->status, 400) << truncated->body;
    auto garbage = client().Put("/v1/states/broken/file", std::string(4096, 'x'), "application/octet-stream");
    ASSERT_TRUE(garbage);
    EXPECT_EQ(garbage->status, 400) << garbage->body;
    EXPECT_EQ(get(client(), "/v1/states/broken").status, 404);

    // Names: unknown -> 404, unsafe -> 400.
    EXPECT_EQ(get(client(), "/v1/states/nope").status, 404);
    EXPECT_EQ(get(client(), "/v1/states/nope/file").status, 404);
    from_state_body["state"] = "nope";
    EXPECT_EQ(post(client(), "/v1/chat/completions", from_state_body).status, 404);
    for (const std::string& bad_name :
         std::vector<std::string>{"..", ".hidden", std::string(65, 'a'), "a%20b", "a$b"}) {
        EXPECT_EQ(get(client(), "/v1/states/" + bad_name).status, 400) << bad_name;
    }
    from_state_body["state"] = "../geo";
    EXPECT_EQ(post(client(), "/v1/chat/completions", from_state_body).status, 400);

    // Delete.
    auto del = client().Delete("/v1/states/geo-copy");
    ASSERT_TRUE(del);
    EXPECT_EQ(del->status, 200);
    EXPECT_EQ(get(client(), "/v1/states/geo-copy").status, 404);
    auto del_again = client().Delete("/v1/states/geo-copy");
    EXPECT_EQ(del_again->status, 404);
}

TEST_F(ServerHttp, DisconnectMidStreamFreesTheSequence) {
    auto gauge = [this](const std::string& name) { return metric_value(get(client(), "/metrics").text, name); };
    const double cancelled_before = gauge("kvstash_requests_cancelled_total");
    // A raw socket, so the test decides exactly when the client goes away.
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(shared_server().port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string body =
        json{{"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"stream", true},
             {"temperature", 1.0},           {"seed", 3},          {"logit_bias", {{"0", -100}, {"2", -100}}}}
            .dump();
    const std::string request =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    std::string received;
    char buffer[4096];
    while (received.find("data: ") == std::string::npos) {
        const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
        ASSERT_GT(n, 0);
        received.append(buffer, static_cast<size_t>(n));
    }
    EXPECT_GE(gauge("kvstash_active_sequences"), 1.0);
    close(fd);
    double active = -1;
    for (int i = 0; i < 50; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        active = gauge("kvstash_active_sequences");
        if (active == 0.0) break;
    }
    EXPECT_EQ(active, 0.0) << "the sequence was not freed after the client left";
    EXPECT_EQ(gauge("kvstash_requests_cancelled_total"), cancelled_before + 1);
}

// Limits on a server of their own: API key, body and upload size, a tiny queue.
TEST(ServerLimits, ApiKeyBodyLimitAndFullQueue) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    ServerProcess server({"-t", "2", "--api-key", "sesame", "--max-body", "2048", "--max-state-bytes", "4096",
                          "--parallel", "1", "--queue", "1"});
    httplib::Client anonymous = server.client();
    EXPECT_EQ(anonymous.Get("/health")->status, 200);  // liveness stays open
    for (const char* path : {"/v1/models", "/metrics", "/v1/states"}) {
        auto r = anonymous.Get(path);
        EXPECT_EQ(r->status, 401) << path;
        EXPECT_NE(r->body.find("authentication_error"), std::string::npos) << r->body;
    }
    EXPECT_EQ(anonymous.Post("/v1/completions", R"({"prompt":"hi"})", "application/json")->status, 401);
    httplib::Client wrong = server.client();
    wrong.set_bearer_token_auth("open");
    EXPECT_EQ(wrong.Get("/v1/models")->status, 401);
    httplib::Client authed = server.client();
    authed.set_bearer_token_auth("sesame");
    EXPECT_EQ(authed.Get("/v1/models")->status, 200);

    // 413: JSON body over --max-body, upload over --max-state-bytes.
    const std::string big = json{{"prompt", std::string(4000, 'a')}}.dump();
    auto too_big = authed.Post("/v1/completions", big, "application/json");
    ASSERT_TRUE(too_big);
    EXPECT_EQ(too_big->status, 413);
    EXPECT_NE(too_big->body.find("--max-body"), std::string::npos) << too_big->body;
    auto upload = authed.Put("/v1/states/x/file", std::string(8192, 'x'), "application/octet-stream");
    ASSERT_TRUE(upload);
    EXPECT_EQ(upload->status, 413);

    // 503: one sequence slot busy (a long stream), one request queued, the next one is refused.
    const json long_stream = {{"prompt", "Once upon a time"},
                              {"max_tokens", 400},
                              {"stream", true},
                              {"temperature", 1.0},
                              {"logit_bias", {{"0", -100}, {"2", -100}}}};
    auto running = std::async(std::launch::async, [&] {
        httplib::Client c = server.client();
        c.set_bearer_token_auth("sesame");
        return c.Post("/v1/completions", long_stream.dump(), "application/json")->status;
    });
    auto metric = [&](const std::string& name) { return metric_value(authed.Get("/metrics")->body, name); };
    for (int i = 0; i < 100 && metric("kvstash_active_sequences") < 1; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto queued = std::async(std::launch::async, [&] {
        httplib::Client c = server.client();
        c.set_bearer_token_auth("sesame");
        return c.Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})", "application/json")->status;
    });
    for (int i = 0; i < 100 && metric("kvstash_queue_depth") < 1; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(metric("kvstash_queue_depth"), 1.0);
    auto refused = authed.Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})", "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 503);
    EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
    EXPECT_EQ(running.get(), 200);
    EXPECT_EQ(queued.get(), 200);
    EXPECT_EQ(server.stop(), 0);
}

// Named states in --state-dir outlive the server.
TEST(ServerStateDir, StatesPersistAcrossRestarts) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const fs::path dir = fs::temp_directory_path() / ("kvstash-serve-states-" + std::to_string(getpid()));
    fs::remove_all(dir);
    const json request = {{"state", "story"}, {"prompt", " The dragon"}, {"max_tokens", 12}, {"temperature", 0}};
    std::string first_answer;
    {
        ServerProcess server({"-t", "2", "--state-dir", dir.string()});
        httplib::Client c = server.client();
        Reply created =
            post(c, "/v1/states", json{{"name", "story"}, {"prompt", "Once upon a time there was a dragon."}});
        ASSERT_EQ(created.status, 201) << created.text;
        EXPECT_GT(created.body["file_bytes"].get<int64_t>(), 0);
        EXPECT_TRUE(fs::exists(dir / "story.kvs"));
        Reply r = post(c, "/v1/completions", request);
        ASSERT_EQ(r.status, 200) << r.text;
        first_answer = r.body["choices"][0]["text"];
    }
    {
        ServerProcess server({"-t", "2", "--state-dir", dir.string()});
        httplib::Client c = server.client();
        Reply info = get(c, "/v1/states/story");
        ASSERT_EQ(info.status, 200) << info.text;
        EXPECT_FALSE(info.body["in_memory"].get<bool>());
        Reply r = post(c, "/v1/completions", request);
        ASSERT_EQ(r.status, 200) << r.text;
        EXPECT_EQ(r.body["choices"][0]["text"], first_answer);
        auto del = c.Delete("/v1/states/story");
        EXPECT_EQ(del->status, 200);
        EXPECT_FALSE(fs::exists(dir / "story.kvs"));
    }
    fs::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::test
