// The CLI as users coming from llama.cpp and shell pipelines drive it (issue 33 items 6 and 10): the prompt
// from standard input (`-f -`, or piped without -p/-f), llama.cpp's -fa refused by name (not read as
// `-f a`), every usage error prefixed `kvstash: error:`, and --save-state / -o checked before the work.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

const std::string kPrompt = "The capital of France is";

std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("kvstash_user_input_" + std::to_string(getpid()) + "_" + name))
        .string();
}

TEST(CliUserInput, FileDashReadsStandardInput) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto direct = run_cli({"tokenize", "-p", kPrompt});
    ASSERT_EQ(direct.exit_code, 0) << direct.err;
    const auto dash = run_cli({"tokenize", "-f", "-"}, kPrompt);
    EXPECT_EQ(dash.exit_code, 0) << dash.err;
    EXPECT_EQ(dash.out, direct.out);
}

TEST(CliUserInput, PipedPromptWithoutFlag) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto direct = run_cli({"tokenize", "-p", kPrompt});
    const auto piped = run_cli({"tokenize"}, kPrompt);
    EXPECT_EQ(piped.exit_code, 0) << piped.err;
    EXPECT_EQ(piped.out, direct.out);

    const std::vector<std::string> greedy = {"generate", "-n", "6", "--temp", "0"};
    std::vector<std::string> with_p = greedy;
    with_p.insert(with_p.end(), {"-p", kPrompt});
    const auto expected = run_cli(with_p);
    ASSERT_EQ(expected.exit_code, 0) << expected.err;
    const auto generated = run_cli(greedy, kPrompt);
    EXPECT_EQ(generated.exit_code, 0) << generated.err;
    EXPECT_EQ(generated.out, expected.out);
    auto dash = greedy;
    dash.insert(dash.end(), {"-f", "-"});
    EXPECT_EQ(run_cli(dash, kPrompt).out, expected.out);

    const std::string state = temp_path("piped.kvs");
    const auto prefill = run_cli({"prefill", "-o", state}, kPrompt);
    EXPECT_EQ(prefill.exit_code, 0) << prefill.err;
    EXPECT_TRUE(std::filesystem::exists(state));
    std::filesystem::remove(state);
}

TEST(CliUserInput, NothingPipedIsStillAUsageError) {
    const auto r = run_cli({"tokenize"});  // standard input: an empty pipe
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("-p/--prompt"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("standard input"), std::string::npos) << r.err;
}

TEST(CliUserInput, FlashAttentionFlagIsRefusedByName) {
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"generate", "-p", "hi", "-fa"},
             {"generate", "-fa", "-p", "hi"},
             {"generate", "-p", "hi", "--flash-attn"},
             {"generate", "-p", "hi", "--flash-attn=on"},
             {"perplexity", "-fa", "-f", "x.txt"},
         }) {
        const auto r = run_cli(args);
        EXPECT_EQ(r.exit_code, 2) << args[2] << ": " << r.err;
        EXPECT_EQ(r.err.rfind("kvstash: error: '", 0), 0u) << r.err;
        EXPECT_NE(r.err.find("flash attention"), std::string::npos) << r.err;
        EXPECT_EQ(r.err.find("'a'"), std::string::npos) << "read as -f a: " << r.err;
    }
}

TEST(CliUserInput, EveryUsageErrorHasTheErrorPrefix) {
    const std::vector<std::vector<std::string>> usage_errors = {
        {},
        {"info", "--no-such-flag"},
        {"generate", "--ctx", "many"},
        {"generate", "-p", "x", "--temp"},
        {"tokenize", "-p", "a", "-f", "b"},
        {"perplexity"},
        {"genrate"},
        {"generate", "-ngl", "99", "-m", "/nonexistent.gguf"},  // no GPU where this suite runs
    };
    for (const auto& args : usage_errors) {
        const auto r = run_cli(args);
        EXPECT_EQ(r.exit_code, 2) << (args.empty() ? "" : args[0]) << ": " << r.err;
        EXPECT_EQ(r.err.rfind("kvstash: error: ", 0), 0u) << "stderr: " << r.err;
    }
}

TEST(CliUserInput, UnwritableSaveStateFailsBeforeGenerating) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::string missing_dir = temp_path("no_such_dir") + "/out.kvs";
    const auto r = run_cli({"generate", "-p", kPrompt, "-n", "8", "--temp", "0", "--save-state", missing_dir});
    EXPECT_EQ(r.exit_code, 5) << r.err;
    EXPECT_TRUE(r.out.empty()) << "generated before failing: " << r.out;
    EXPECT_NE(r.err.find(missing_dir), std::string::npos) << r.err;

    const auto directory = run_cli({"prefill", "-p", kPrompt, "-o", std::filesystem::temp_directory_path().string()});
    EXPECT_EQ(directory.exit_code, 5) << directory.err;
}

// Gemma 3 270M's GGUF is the base model: no chat template. The message says so and names the family's.
TEST(CliUserInput, BaseModelWithoutChatTemplateIsExplained) {
    const char* dir = std::getenv("KVSTASH_MODELS_DIR");
    const std::string model =
        (dir != nullptr && *dir != '\0' ? std::string(dir) : source_dir() + "/models") + "/gemma-3-270m-q4_k_m.gguf";
    if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not found: run scripts/fetch_model.sh gemma3";
    const auto r = run_cli({"generate", "-m", model, "--chat", "-p", "Hi", "-n", "4"});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_EQ(r.err.rfind("kvstash: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("has no chat template"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("base (pretrained) model"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("family's chat models use 'gemma'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--chat-template NAME"), std::string::npos) << r.err;
    const auto with_template =
        run_cli({"generate", "-m", model, "--chat", "--chat-template", "gemma", "-p", "Hi", "-n", "2", "--temp", "0"});
    EXPECT_EQ(with_template.exit_code, 0) << with_template.err;
}

}  // namespace
}  // namespace kvstash::test
