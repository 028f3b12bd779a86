// The server's limits on a server of their own: the API key, the JSON body and upload sizes (413), a
// chunked body (411), and a full queue (503 with Retry-After).
#include <gtest/gtest.h>

#include <future>

#include "e2e/server/http_client.h"

namespace kvstash::test {
namespace {

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
    // 411: a chunked body (no Content-Length) is refused before it is read, whatever its size. This client
    // sends the body without waiting for a go-ahead; the server closes with it unread, and without a
    // lingering close (cpp-httplib 0.11) the answer can be lost to the reset: no answer is the other outcome.
    auto chunked = authed.Post(
        "/v1/completions",
        [](size_t, httplib::DataSink& sink) {
            sink.os << R"({"prompt":"hi","max_tokens":1})";
            sink.done();
            return true;
        },
        "application/json");
    if (chunked) {
        EXPECT_EQ(chunked->status, 411);
        EXPECT_NE(chunked->body.find("Content-Length"), std::string::npos) << chunked->body;
    }

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

}  // namespace
}  // namespace kvstash::test
