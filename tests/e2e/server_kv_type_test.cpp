// `kvstash serve --kv-type`: a server started with a q8_0 cache computes its sequences in q8_0 (a named
// state it prefills is a q8_0 state file, and a greedy completion is what `kvstash generate --kv-type q8_0`
// gives), and a KV type it does not know is refused at start as bad usage (exit code 2).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "e2e/server/http_client.h"
#include "e2e/server/server_process.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

TEST(ServerKvType, Q8_0CacheServesAndSavesQ8_0States) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    ServerProcess server({"-t", "2", "--kv-type", "q8_0"});
    httplib::Client client = server.client();

    const std::string expected =
        generate_cli({"-p", "The capital of France is", "--temp", "0", "-n", "16", "--kv-type", "q8_0"});
    Reply r = post(client, "/v1/completions",
                   json{{"prompt", "The capital of France is"}, {"max_tokens", 16}, {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.text;
    EXPECT_EQ(r.body["choices"][0]["text"], expected);

    // A named state prefilled by this server holds a q8_0 cache: its file says so.
    Reply created = post(client, "/v1/states", json{{"name", "q8"}, {"prompt", "Once upon a time, in a small town"}});
    ASSERT_EQ(created.status, 201) << created.text;
    auto file = client.Get("/v1/states/q8/file");
    ASSERT_TRUE(file);
    ASSERT_EQ(file->status, 200) << file->body;
    const std::string path =
        (std::filesystem::temp_directory_path() / ("kvstash_server_kv_type_" + std::to_string(getpid()) + ".kvs"))
            .string();
    std::ofstream(path, std::ios::binary) << file->body;
    const ProcessResult info = run_cli({"state", "info", path});
    std::filesystem::remove(path);
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find("kv:            q8_0"), std::string::npos) << info.out;
}

TEST(ServerKvType, UnknownTypeIsBadUsage) {
    const ProcessResult r = run_cli({"serve", "--port", "0", "--kv-type", "q4_0"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--kv-type"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvstash::test
