// One test per documented exit code of the `kvstash` CLI (tools/kvstash/main.cpp, README "Exit codes"),
// each through the real binary: 0 ok, 2 bad usage, 3 bad input file, 4 too long for the context, 5
// cannot write an output, 6 cannot listen. (1, an internal error, has no trigger a user can cause; it
// is what an unexpected exception gives, checked by review of main.cpp.)
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("kvstash_exit_codes_" + std::to_string(getpid()) + "_" + name))
        .string();
}

TEST(CliExitCodes, Zero_Success) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli({"tokenize", "-p", "hello"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(CliExitCodes, Two_UnknownCommandIsNamedWithASuggestion) {
    const auto r = run_cli({"genrate", "-p", "hi"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("unknown command 'genrate'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("did you mean 'generate'?"), std::string::npos) << r.err;
    const auto far = run_cli({"xyzzy"});
    EXPECT_EQ(far.exit_code, 2);
    EXPECT_NE(far.err.find("unknown command 'xyzzy'"), std::string::npos) << far.err;
    EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << "no suggestion for a word far from all: " << far.err;
}

TEST(CliExitCodes, Two_GpuFlagsWithoutAGpuSayWhy) {
    // This suite runs where there is no GPU (or no CUDA build): --device cuda and llama.cpp's -ngl N > 0
    // cannot be honoured, and say so (which build or which device is missing) before reading the model.
    for (const std::vector<std::string>& flags : {std::vector<std::string>{"-ngl", "99"},
                                                  {"-ngl=1"},
                                                  {"--n-gpu-layers", "99"},
                                                  {"--gpu-layers", "5"},
                                                  {"--device", "cuda"}}) {
        std::vector<std::string> args{"generate", "-p", "hi", "-m", "/nonexistent.gguf"};
        args.insert(args.end(), flags.begin(), flags.end());
        const auto r = run_cli(args);
        EXPECT_EQ(r.exit_code, 2) << flags[0] << ": " << r.err;
        EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
        EXPECT_TRUE(r.err.find("built without CUDA") != std::string::npos ||
                    r.err.find("no CUDA device") != std::string::npos)
            << r.err;
    }
    const auto disagree = run_cli({"generate", "-p", "hi", "--device", "cpu", "-ngl", "9"});
    EXPECT_EQ(disagree.exit_code, 2);
    EXPECT_NE(disagree.err.find("disagree"), std::string::npos) << disagree.err;
    const auto bad = run_cli({"generate", "-p", "hi", "--device", "tpu"});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.err.find("--device"), std::string::npos) << bad.err;
}

TEST(CliExitCodes, Zero_NglZeroMeansTheCpu) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli({"generate", "-p", "The capital of France is", "-n", "2", "--temp", "0", "-ngl", "0"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto d = run_cli({"generate", "-p", "The capital of France is", "-n", "2", "--temp", "0", "--device", "cpu"});
    EXPECT_EQ(d.exit_code, 0) << d.err;
    EXPECT_EQ(r.out, d.out);
}

TEST(CliExitCodes, Two_IgnoredFlagsAreRefused) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::string state = temp_path("ignored.kvs");
    ASSERT_EQ(run_cli({"prefill", "-p", "The capital of France is", "-o", state}).exit_code, 0);
    const auto ctx = run_cli({"generate", "--state", state, "--ctx", "100", "-p", " x", "-n", "1"});
    EXPECT_EQ(ctx.exit_code, 2);
    EXPECT_NE(ctx.err.find("--ctx"), std::string::npos) << ctx.err;
    const auto kv = run_cli({"generate", "--state", state, "--kv-type", "f32", "-p", " x", "-n", "1"});
    EXPECT_EQ(kv.exit_code, 2);
    const auto temp = run_cli({"generate", "--state", state, "--resume-sampler", "--temp", "0.5", "-p", " x"});
    EXPECT_EQ(temp.exit_code, 2);
    EXPECT_NE(temp.err.find("--resume-sampler"), std::string::npos) << temp.err;
    std::filesystem::remove(state);
}

TEST(CliExitCodes, Three_MissingInputFiles) {
    const std::string missing = temp_path("does_not_exist");
    const std::vector<std::vector<std::string>> commands = {
        {"info", "-m", missing},       {"generate", "--state", missing, "-p", " x"},
        {"generate", "-f", missing},   {"prefill", "-f", missing, "-o", temp_path("never.kvs")},
        {"perplexity", "-f", missing}, {"state", "info", missing},
        {"chat", "--load", missing},
    };
    for (const auto& args : commands) {
        if (args[0] != "info" && !std::filesystem::exists(default_model_path())) continue;
        const auto r = run_cli(args);
        EXPECT_EQ(r.exit_code, 3) << args[0] << " " << args[1] << ": " << r.err;
        EXPECT_NE(r.err.find(missing), std::string::npos) << "names the path: " << r.err;
    }
}

TEST(CliExitCodes, Four_PromptLongerThanTheContext) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli({"generate", "-c", "16", "-p", std::string(400, 'a') + " long prompt", "-n", "1"});
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_NE(r.err.find("--ctx"), std::string::npos) << r.err;
}

TEST(CliExitCodes, Five_CannotWriteTheOutput) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::string dir = temp_path("no_such_dir");
    const auto r = run_cli({"prefill", "-p", "hello", "-o", dir + "/sub/out.kvs"});
    EXPECT_EQ(r.exit_code, 5) << r.err;
}

TEST(CliExitCodes, Six_PortInUse) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const int sock = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(sock, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(::listen(sock, 1), 0);
    socklen_t len = sizeof addr;
    ASSERT_EQ(::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    const auto r = run_cli({"serve", "--host", "127.0.0.1", "--port", std::to_string(ntohs(addr.sin_port))});
    ::close(sock);
    EXPECT_EQ(r.exit_code, 6) << r.err;
    EXPECT_NE(r.err.find("cannot listen"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvstash::test
