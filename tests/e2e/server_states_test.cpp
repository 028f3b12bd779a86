// Named states over HTTP end to end: create from messages or a prompt, continue, list, download,
// upload (and refuse broken uploads), delete; with --state-dir they outlive the server.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "e2e/server/http_client.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

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
        // An upload lands in the directory as <name>.kvs; a refused one leaves no file (temporary or not).
        auto file = c.Get("/v1/states/story/file");
        ASSERT_TRUE(file);
        ASSERT_EQ(file->status, 200);
        auto put = c.Put("/v1/states/story-copy/file", file->body, "application/octet-stream");
        ASSERT_TRUE(put);
        ASSERT_EQ(put->status, 201) << put->body;
        EXPECT_EQ(fs::file_size(dir / "story-copy.kvs"), file->body.size());
        auto bad = c.Put("/v1/states/broken/file", std::string(4096, 'x'), "application/octet-stream");
        ASSERT_TRUE(bad);
        EXPECT_EQ(bad->status, 400) << bad->body;
        std::vector<std::string> names;
        for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
        std::sort(names.begin(), names.end());
        EXPECT_EQ(names, (std::vector<std::string>{"story-copy.kvs", "story.kvs"}));
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
