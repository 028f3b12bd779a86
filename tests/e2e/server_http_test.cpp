// `kvstash serve` end to end over real HTTP (cpp-httplib's client): health, models and metrics,
// completions and chat completions, SSE parsing, logprobs, n > 1, every error status, batching invariance
// (concurrent requests answer exactly what each alone does), the prefix cache and cancellation on
// disconnect. Named states are in server_states_test.cpp, the server's limits in server_limits_test.cpp.
// Expected texts come from an independent path: `kvstash generate` (the library's generate() loop), run
// through the CLI with the same parameters.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <future>

#include "e2e/server/http_client.h"

namespace kvstash::test {
namespace {

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
        {"/v1/completions", R"({"prompt": "hi", "echo": true, "logprobs": 1})", "echo"},
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
}  // namespace
}  // namespace kvstash::test
