// The CLI's conventions (issue 18 item 5) through the real binary: --version, a random default seed
// (printed by --timings) unless --seed/-s is given, several continuations kept apart on stdout (or one
// JSON object each with --json), llama.cpp spellings (-c, -s), progress on stderr only, and the chat
// REPL ignoring blank lines and reporting time to first token.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("kvstash_conventions_" + std::to_string(getpid()) + "_" + name))
        .string();
}

// The N in "seed: N" on stderr, or "" when absent.
std::string seed_of(const std::string& err) {
    std::smatch m;
    return std::regex_search(err, m, std::regex("seed: ([0-9]+)")) ? m[1].str() : "";
}

TEST(CliConventions, VersionNamesVersionCommitAndKernels) {
    const auto r = run_cli({"--version"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(^kvstash \d+\.\d+\.\d+ \(commit [0-9a-f]{7,}|unknown)")))
        << r.out;
    EXPECT_NE(r.out.find("kernels "), std::string::npos) << r.out;
    // The commit the binary was built from, not the one its build directory was configured at (the header is
    // regenerated at every build: cmake/git_commit.cmake). Checked where the source tree is a git checkout.
    if (!std::filesystem::exists("/usr/bin/git")) return;
    const auto head = run_process({"/usr/bin/git", "-C", source_dir(), "rev-parse", "--short=12", "HEAD"});
    if (head.exit_code == 0 && !head.out.empty()) {
        const std::string commit = head.out.substr(0, head.out.find_first_of("\r\n"));
        EXPECT_NE(r.out.find("(commit " + commit + ","), std::string::npos) << r.out << " vs HEAD " << commit;
    }
}

// A KVSTASH_ISA this CPU cannot run is named in the version text (it aborted the process before), and the
// path that runs the AVX-512 kernels without VNNI is accepted where AVX-512 is.
TEST(CliConventions, VersionReportsABadKvstashIsa) {
    const auto bad = run_process({"/usr/bin/env", "KVSTASH_ISA=sse9", cli_path(), "--version"});
    ASSERT_EQ(bad.exit_code, 0) << bad.err;
    EXPECT_NE(bad.out.find("no kernels: KVSTASH_ISA=sse9 is not a known instruction set"), std::string::npos)
        << bad.out;
    const auto plain = run_cli({"--version"});
    if (plain.out.find(" avx512)") == std::string::npos) return;
    const auto novnni = run_process({"/usr/bin/env", "KVSTASH_ISA=avx512-novnni", cli_path(), "--version"});
    ASSERT_EQ(novnni.exit_code, 0) << novnni.err;
    EXPECT_NE(novnni.out.find("kernels avx512;"), std::string::npos) << novnni.out;
}

TEST(CliConventions, DefaultSeedIsRandomAndPrintedGivenSeedRepeats) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::vector<std::string> base = {"generate", "-p",  "Once upon a time", "-n", "12",
                                           "--temp",   "1.0", "--timings"};
    const auto a = run_cli(base);
    const auto b = run_cli(base);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    const std::string seed_a = seed_of(a.err), seed_b = seed_of(b.err);
    ASSERT_FALSE(seed_a.empty()) << a.err;
    EXPECT_NE(seed_a, seed_b) << "two runs without --seed drew the same seed";
    EXPECT_NE(a.err.find("pass --seed " + seed_a), std::string::npos) << a.err;
    // The printed seed repeats run a's text, with --seed and with llama.cpp's -s.
    std::vector<std::string> again = base;
    again.insert(again.end(), {"--seed", seed_a});
    const auto a2 = run_cli(again);
    ASSERT_EQ(a2.exit_code, 0) << a2.err;
    EXPECT_EQ(a2.out, a.out);
    std::vector<std::string> again_short = base;
    again_short.insert(again_short.end(), {"-s", seed_a});
    EXPECT_EQ(run_cli(again_short).out, a.out);
}

TEST(CliConventions, SeveralContinuationsAreSeparatedOrJson) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli({"generate", "-p", "The sky is", "-p", "Water is", "-n", "6", "--temp", "0"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto first = r.out.find("--- continuation 1/2 ---\n");
    const auto second = r.out.find("--- continuation 2/2 ---\n");
    EXPECT_EQ(first, 0u) << r.out;
    EXPECT_NE(second, std::string::npos) << r.out;

    const auto j = run_cli({"generate", "-p", "The sky is", "-p", "Water is", "-n", "6", "--temp", "0", "--json"});
    ASSERT_EQ(j.exit_code, 0) << j.err;
    std::istringstream lines(j.out);
    std::string line;
    std::vector<nlohmann::json> objects;
    while (std::getline(lines, line)) objects.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(objects.size(), 2u) << j.out;
    EXPECT_EQ(objects[0]["prompt"], "The sky is");
    EXPECT_EQ(objects[1]["index"], 1);
    EXPECT_EQ(objects[1]["generated_tokens"], 6);
    // The same greedy text as the streamed form: the separator is the only difference.
    const std::string streamed_first = r.out.substr(first + 25, second - first - 25);
    EXPECT_EQ(streamed_first, objects[0]["text"].get<std::string>() + "\n");
}

TEST(CliConventions, PerplexityProgressGoesToStderr) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::string text = temp_path("ppl.txt");
    {
        std::ofstream out(text);
        for (int i = 0; i < 60; ++i) out << "The quick brown fox jumps over the lazy dog, again and again. ";
    }
    const auto r = run_cli({"perplexity", "-f", text, "-c", "128"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("ppl = ", 0), 0u) << "stdout must hold only the result line:\n" << r.out;
    EXPECT_NE(r.err.find("ppl so far"), std::string::npos) << r.err;
    std::filesystem::remove(text);
}

TEST(CliConventions, ChatIgnoresBlankLinesAndReportsTimeToFirstToken) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli({"chat", "-n", "4", "--temp", "0", "--timings"}, "   \n\t\nHello\n  \n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    size_t turns = 0;
    for (size_t at = r.err.find("timings: "); at != std::string::npos; at = r.err.find("timings: ", at + 1)) ++turns;
    EXPECT_EQ(turns, 1u) << "blank lines must not be sent as turns:\n" << r.err;
    EXPECT_NE(r.err.find("time to first token"), std::string::npos) << r.err;
}

TEST(CliConventions, ChatLoadRefusesCtx) {
    const auto r = run_cli({"chat", "--load", temp_path("any.kvs"), "--ctx", "512"}, "");
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--load"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvstash::test
