// `kvstash serve` through real third-party clients: the official `openai` Python package (run with the
// project venv's python, made by scripts/setup.sh) and curl. A missing client is a failure, with the
// command that installs it, never a silent skip.
#include <gtest/gtest.h>

#include <cstdlib>
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

ServerProcess& shared_server() {
    static ServerProcess server({"-t", "2"});
    return server;
}

std::string venv_python() {
    if (const char* p = std::getenv("KVSTASH_PYTHON"); p && *p) return p;
    return source_dir() + "/.venv/bin/python";
}

std::string curl_path() {
    for (const char* p : {"/usr/bin/curl", "/bin/curl", "/usr/local/bin/curl"}) {
        if (fs::exists(p)) return p;
    }
    return {};
}

ProcessResult curl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{curl_path(), "-sS", "--max-time", "120"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv);
}

TEST(ServerClients, OpenAIPythonPackage) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::string python = venv_python();
    ASSERT_TRUE(fs::exists(python)) << "no project venv at " << python
                                    << ": run scripts/setup.sh (it creates .venv with the `openai` package)";
    const ProcessResult probe = run_process({python, "-c", "import openai"});
    ASSERT_EQ(probe.exit_code, 0) << "the `openai` package is missing from " << python << ": run scripts/setup.sh\n"
                                  << probe.err;
    const ProcessResult r =
        run_process({python, source_dir() + "/tests/e2e/server/openai_client.py", shared_server().url()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("checks passed"), std::string::npos) << r.out << r.err;
}

TEST(ServerClients, Curl) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    ASSERT_FALSE(curl_path().empty()) << "curl is not installed: run scripts/setup.sh (it installs Debian's curl)";
    const std::string url = shared_server().url();

    ProcessResult health = curl({url + "/health"});
    ASSERT_EQ(health.exit_code, 0) << health.err;
    EXPECT_EQ(json::parse(health.out)["status"], "ok");

    // The README's example.
    ProcessResult chat = curl(
        {url + "/v1/chat/completions", "-H", "Content-Type: application/json", "-d",
         R"({"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 24, "temperature": 0})"});
    ASSERT_EQ(chat.exit_code, 0) << chat.err;
    const json answer = json::parse(chat.out);
    EXPECT_NE(answer["choices"][0]["message"]["content"].get<std::string>().find("Paris"), std::string::npos)
        << chat.out;

    // Streaming (-N: no buffering): SSE events, then [DONE].
    ProcessResult stream =
        curl({"-N", url + "/v1/completions", "-d",
              R"({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0, "stream": true})"});
    ASSERT_EQ(stream.exit_code, 0) << stream.err;
    EXPECT_EQ(stream.out.rfind("data: {", 0), 0u) << stream.out;
    EXPECT_NE(stream.out.find("\n\ndata: [DONE]\n\n"), std::string::npos) << stream.out;
    EXPECT_NE(stream.out.find("\" Paris\""), std::string::npos) << stream.out;

    // States: create, download with -o, upload with --data-binary, HTTP codes with -w.
    const fs::path file = fs::temp_directory_path() / ("kvstash-curl-" + std::to_string(getpid()) + ".kvs");
    ProcessResult created = curl({"-o", "/dev/null", "-w", "%{http_code}", url + "/v1/states", "-d",
                                  R"({"name": "curl-state", "prompt": "Once upon a time"})"});
    EXPECT_EQ(created.out, "201") << created.err;
    ProcessResult download = curl({"-o", file.string(), "-w", "%{http_code}", url + "/v1/states/curl-state/file"});
    EXPECT_EQ(download.out, "200");
    EXPECT_GT(fs::file_size(file), 0u);
    std::string at_file = "@";  // (built in two steps: GCC 12's -Wrestrict misfires on "@" + string)
    at_file += file.string();
    ProcessResult upload =
        curl({"-X", "PUT", "--data-binary", at_file, "-w", "\n%{http_code}", url + "/v1/states/curl-copy/file"});
    EXPECT_NE(upload.out.find("\n201"), std::string::npos) << upload.out;
    ProcessResult missing = curl({"-o", "/dev/null", "-w", "%{http_code}", url + "/v1/states/not-there"});
    EXPECT_EQ(missing.out, "404");
    ProcessResult bad = curl({"-o", "/dev/null", "-w", "%{http_code}", url + "/v1/completions", "-d", "{oops"});
    EXPECT_EQ(bad.out, "400");
    fs::remove(file);
}

}  // namespace
}  // namespace kvstash::test
