// HTTP compatibility with what llama-server's and OpenAI's clients call (issue 33 item 8): the Responses
// API, array and token-id prompts and `echo` through the official `openai` package
// (tests/e2e/server/openai_compat_client.py); llama-server's /completion, /props, /slots and
// /apply-template with its field names; CORS (--cors-origin, preflight OPTIONS). The expected texts are
// the server's own /v1/completions answers for the same prompt at temperature 0 (each route must give
// what the OpenAI route gives), and SmolLM2's "Paris".
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "e2e/server/http_client.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

ServerProcess& compat_server() {
    static ServerProcess server({"-t", "2", "--parallel", "4", "--cors-origin", "http://app.example"});
    return server;
}

std::string venv_python() {
    if (const char* p = std::getenv("KVSTASH_PYTHON"); p && *p) return p;
    return source_dir() + "/.venv/bin/python";
}

TEST(ServerCompat, OpenAIPythonResponsesArraysAndEcho) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::string python = venv_python();
    ASSERT_TRUE(fs::exists(python)) << "no project venv at " << python << ": run scripts/setup.sh";
    const ProcessResult r =
        run_process({python, source_dir() + "/tests/e2e/server/openai_compat_client.py", compat_server().url()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("checks passed"), std::string::npos) << r.out << r.err;
}

TEST(ServerCompat, TokenIdPromptsAnswerAsTheirText) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client = compat_server().client();
    const std::string prompt = "The capital of France is";
    const Reply ids = post(client, "/tokenize", json{{"content", prompt}, {"add_special", true}});
    ASSERT_EQ(ids.status, 200) << ids.text;
    const Reply by_text =
        post(client, "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}});
    const Reply by_ids =
        post(client, "/v1/completions", json{{"prompt", ids.body["tokens"]}, {"max_tokens", 6}, {"temperature", 0}});
    ASSERT_EQ(by_ids.status, 200) << by_ids.text;
    EXPECT_EQ(by_ids.body["choices"][0]["text"], by_text.body["choices"][0]["text"]);
    EXPECT_EQ(by_ids.body["usage"]["prompt_tokens"], ids.body["tokens"].size());
    const Reply outside = post(client, "/v1/completions", json{{"prompt", json::array({1, 99999999})}});
    EXPECT_EQ(outside.status, 400) << outside.text;
    EXPECT_EQ(outside.body["error"]["param"], "prompt");
}

TEST(ServerCompat, LlamaServerCompletionRoute) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client = compat_server().client();
    const std::string prompt = "The capital of France is";
    const Reply openai =
        post(client, "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}});
    ASSERT_EQ(openai.status, 200) << openai.text;
    const std::string expected = openai.body["choices"][0]["text"];
    EXPECT_NE(expected.find("Paris"), std::string::npos) << expected;

    const Reply r = post(client, "/completion",
                         json{{"prompt", prompt},
                              {"n_predict", 8},
                              {"temperature", 0},
                              {"return_tokens", true},
                              {"n_probs", 2},
                              {"cache_prompt", true}});
    ASSERT_EQ(r.status, 200) << r.text;
    EXPECT_EQ(r.body["content"], expected);
    EXPECT_EQ(r.body["stop"], true);
    EXPECT_EQ(r.body["stop_type"], "limit");
    EXPECT_EQ(r.body["tokens_predicted"], 8);
    EXPECT_EQ(r.body["tokens_evaluated"], openai.body["usage"]["prompt_tokens"]);
    EXPECT_EQ(r.body["tokens"].size(), 8u) << r.text;
    ASSERT_EQ(r.body["completion_probabilities"].size(), 8u) << r.text;
    EXPECT_EQ(r.body["completion_probabilities"][0]["top_logprobs"].size(), 2u);
    EXPECT_EQ(r.body["completion_probabilities"][0]["id"], r.body["tokens"][0]);
    for (const char* key : {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second"})
        EXPECT_TRUE(r.body["timings"].contains(key)) << key << ": " << r.text;
    EXPECT_EQ(r.body["timings"]["predicted_n"], 8);
    EXPECT_EQ(r.body["generation_settings"]["n_ctx"], get(client, "/v1/models").body["data"][0]["meta"]["n_ctx"]);

    // Streamed: data events with "content" pieces and stop false, then the whole object with stop true
    // (llama-server's shape: no [DONE]).
    auto res = client.Post("/completion",
                           json{{"prompt", prompt}, {"n_predict", 8}, {"temperature", 0}, {"stream", true}}.dump(),
                           "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    std::string streamed;
    json last;
    size_t at = 0;
    while ((at = res->body.find("data: ", at)) != std::string::npos) {
        const size_t end = res->body.find("\n\n", at);
        ASSERT_NE(end, std::string::npos);
        last = json::parse(res->body.substr(at + 6, end - at - 6));
        if (!last["stop"].get<bool>()) streamed += last["content"].get<std::string>();
        at = end;
    }
    EXPECT_EQ(streamed, expected);
    EXPECT_EQ(last["stop"], true);
    EXPECT_EQ(last["tokens_predicted"], 8);
    EXPECT_EQ(res->body.find("[DONE]"), std::string::npos);

    // llama-server's JSON Schema field, and n_predict -1 (until the end of generation).
    const Reply schema =
        post(client, "/completion", std::string(R"({"prompt": "A person as JSON:", "n_predict": -1, "temperature": 0,
                                  "json_schema": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                  "age": {"type": "integer"}}, "required": ["name", "age"]}})"));
    ASSERT_EQ(schema.status, 200) << schema.text;
    const std::string doc = schema.body["content"];
    EXPECT_EQ(schema.body["stop_type"], "eos") << doc;
    EXPECT_LT(doc.find("\"name\""), doc.find("\"age\"")) << doc;
}

TEST(ServerCompat, LlamaServerPropsSlotsAndApplyTemplate) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client = compat_server().client();
    const Reply props = get(client, "/props");
    ASSERT_EQ(props.status, 200) << props.text;
    EXPECT_EQ(props.body["total_slots"], 4);
    const json n_ctx = get(client, "/v1/models").body["data"][0]["meta"]["n_ctx"];
    EXPECT_EQ(props.body["default_generation_settings"]["n_ctx"], n_ctx);
    EXPECT_EQ(props.body["model_path"], default_model_path());
    EXPECT_FALSE(props.body["chat_template"].get<std::string>().empty());
    const Reply slots = get(client, "/slots");
    ASSERT_EQ(slots.status, 200) << slots.text;
    ASSERT_EQ(slots.body.size(), 4u);
    EXPECT_EQ(slots.body[3]["id"], 3);
    EXPECT_EQ(slots.body[0]["n_ctx"], n_ctx);
    EXPECT_TRUE(slots.body[0]["is_processing"].is_boolean());

    const json messages =
        json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi!"}}});
    const Reply applied = post(client, "/apply-template", json{{"messages", messages}});
    ASSERT_EQ(applied.status, 200) << applied.text;
    // SmolLM2's ChatML, ending with the assistant header (the CLI's `chat` renders the same).
    EXPECT_EQ(applied.body["prompt"],
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(post(client, "/apply-template", json{{"messages", "x"}}).status, 400);
}

TEST(ServerCompat, CorsHeadersAndPreflight) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client = compat_server().client();
    // A preflight from the allowed origin: 204 with what the browser asked for.
    auto pre =
        client.Options("/v1/chat/completions", {{"Origin", "http://app.example"},
                                                {"Access-Control-Request-Method", "POST"},
                                                {"Access-Control-Request-Headers", "authorization, content-type"}});
    ASSERT_TRUE(pre);
    EXPECT_EQ(pre->status, 204);
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
    EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
    // A request from it: the answer carries the header, errors too.
    auto ok = client.Get("/health", {{"Origin", "http://app.example"}});
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
    auto bad = client.Post("/v1/completions", {{"Origin", "http://app.example"}}, "{oops", "application/json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400);
    EXPECT_EQ(bad->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
    // Another origin gets no CORS header (the browser then refuses the answer to its page).
    auto other = client.Get("/health", {{"Origin", "http://evil.example"}});
    ASSERT_TRUE(other);
    EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
}

TEST(ServerCompat, NoCorsHeadersWithoutTheFlag) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    httplib::Client client = shared_server().client();
    auto ok = client.Get("/health", {{"Origin", "http://app.example"}});
    ASSERT_TRUE(ok);
    EXPECT_FALSE(ok->has_header("Access-Control-Allow-Origin"));
}

}  // namespace
}  // namespace kvstash::test
