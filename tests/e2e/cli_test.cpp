// End-to-end tests of the `kvstash` binary through its real interface: arguments, exit codes,
// stdout (results only) and stderr (diagnostics).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

TEST(Cli, HelpListsSubcommands) {
    const auto r = run_cli({"--help"});
    EXPECT_EQ(r.exit_code, 0);
    for (const char* sub : {"info", "tokenize", "generate", "perplexity"})
        EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
}

TEST(Cli, NoSubcommandIsUsageError) {
    const auto r = run_cli({});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_FALSE(r.err.empty());
}

TEST(Cli, UnknownFlagIsUsageError) {
    const auto r = run_cli({"info", "--no-such-flag"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("no-such-flag"), std::string::npos) << r.err;
}

TEST(Cli, MissingModelNamesThePath) {
    const auto r = run_cli({"info", "-m", "/nonexistent/model.gguf"});
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
}

TEST(Cli, NotAGgufFileIsAClearError) {
    const std::string path = std::filesystem::temp_directory_path() / "kvstash_not_a_model.gguf";
    std::ofstream(path) << "this is not a GGUF file at all";
    const auto r = run_cli({"info", "-m", path});
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_NE(r.err.find("kvstash: error:"), std::string::npos) << r.err;
    EXPECT_EQ(r.signal, 0);
    std::filesystem::remove(path);
}

TEST(Cli, InfoOnDefaultModel) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli({"info"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("llama"), std::string::npos);
    EXPECT_NE(r.out.find("layers:        30"), std::string::npos) << r.out;
}

TEST(Cli, GenerateRejectsEmptyPrompt) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli({"generate", "-p", "", "-n", "4"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("empty"), std::string::npos) << r.err;
}

TEST(Cli, GenerateBadValueIsUsageError) {
    const auto r = run_cli({"generate", "-p", "hi", "-n", "-5"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST(Cli, GreedyGenerationSaysParis) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli({"generate", "-p", "The capital of France is", "-n", "8"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
}

TEST(Cli, PerplexityTooShortTextIsAClearError) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::string path = std::filesystem::temp_directory_path() / "kvstash_short.txt";
    std::ofstream(path) << "Too short.";
    const auto r = run_cli({"perplexity", "-f", path, "--ctx", "256"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--ctx"), std::string::npos) << r.err;
    std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvstash::test
