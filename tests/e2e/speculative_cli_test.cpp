// `kvstash generate` / `chat` with --spec through the real binary: stdout (the text, --json lines) and the
// --save-state file are byte for byte those without --spec; --timings reports the guesses; bad flag
// combinations exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

std::string file_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SpeculativeCli, GenerateOutputAndSavedStateAreThoseWithoutSpec) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto dir = std::filesystem::temp_directory_path() / ("kvstash_spec_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::vector<std::string> base = {
        "generate", "--chat", "-p",    "Repeat twice: red apples, green pears, yellow lemons.", "-n", "30",
        "-t",       "2",      "--json"};
    for (const char* temp : {"0", "0.8"}) {
        std::vector<std::string> plain = base, spec = base;
        plain.insert(plain.end(), {"--temp", temp, "--seed", "3", "--save-state", (dir / "plain.kvs").string()});
        spec.insert(spec.end(), {"--temp", temp, "--seed", "3", "--save-state", (dir / "spec.kvs").string(), "--spec",
                                 "lookup", "--spec-max", "6", "--timings"});
        const auto a = run_cli(plain);
        const auto b = run_cli(spec);
        ASSERT_EQ(a.exit_code, 0) << a.err;
        ASSERT_EQ(b.exit_code, 0) << b.err;
        EXPECT_EQ(a.out, b.out) << "temperature " << temp;
        EXPECT_EQ(file_bytes(dir / "plain.kvs"), file_bytes(dir / "spec.kvs")) << "temperature " << temp;
        EXPECT_NE(b.err.find("speculation (lookup): drafted "), std::string::npos) << b.err;
    }
    // A draft model (here the model itself) as well.
    std::vector<std::string> plain = base, draft = base;
    plain.insert(plain.end(), {"--temp", "0", "--seed", "3"});
    draft.insert(draft.end(), {"--temp", "0", "--seed", "3", "--spec", "draft", "--draft-model", default_model_path()});
    const auto a = run_cli(plain);
    const auto b = run_cli(draft);
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(a.out, b.out);
    std::filesystem::remove_all(dir);
}

TEST(SpeculativeCli, BadFlagCombinationsAreUsageErrors) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto without_spec = run_cli({"generate", "-p", "Hi", "-n", "2", "--draft-model", default_model_path()});
    EXPECT_EQ(without_spec.exit_code, 2);
    EXPECT_NE(without_spec.err.find("--spec draft"), std::string::npos) << without_spec.err;
    const auto no_draft = run_cli({"generate", "-p", "Hi", "-n", "2", "--spec", "draft"});
    EXPECT_EQ(no_draft.exit_code, 2);
    const auto self_gguf = run_cli({"generate", "-p", "Hi", "-n", "2", "--spec", "self"});
    EXPECT_EQ(self_gguf.exit_code, 2);
    EXPECT_NE(self_gguf.err.find("Hugging Face"), std::string::npos) << self_gguf.err;
    const auto unknown = run_cli({"generate", "-p", "Hi", "-n", "2", "--spec", "medusa"});
    EXPECT_EQ(unknown.exit_code, 2);
}

TEST(SpeculativeCli, ChatRepliesAreThoseWithoutSpec) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::string input = "Say: one two three four five.\nSay it again.\n";
    const auto a = run_cli({"chat", "-n", "20", "--temp", "0", "-t", "2"}, input);
    const auto b = run_cli({"chat", "-n", "20", "--temp", "0", "-t", "2", "--spec", "lookup"}, input);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(a.out, b.out);
}

}  // namespace
}  // namespace kvstash::test
