// The text layer through the real CLI: chat templates, sampling flags, chat REPL over piped stdin,
// tokenize, and the bad-input contract (one-line error, non-zero exit, never a crash).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

TEST(TextCli, EverySubcommandHasHelp) {
    for (const char* sub : {"info", "tokenize", "generate", "chat", "perplexity", "prefill"}) {
        const auto r = run_cli({sub, "--help"});
        EXPECT_EQ(r.exit_code, 0) << sub;
        EXPECT_NE(r.out.find("--model"), std::string::npos) << sub << ":\n" << r.out;
    }
    EXPECT_EQ(run_cli({"state", "info", "--help"}).exit_code, 0);
}

TEST(TextCli, TokenizePrintsIds) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli({"tokenize", "-p", "The capital of France is"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Ids from Hugging Face's tokenizer for this model (tests/fixtures/smollm2/greedy.json, case "plain").
    EXPECT_EQ(r.out, "504 3575 282 4649 314\n");
}

TEST(TextCli, ChatTemplatedAnswer) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli({"generate", "--chat", "-p", "What is the capital of France?", "--temp", "0", "-n", "24"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("<|im_"), std::string::npos) << "control tokens leaked into the answer: " << r.out;
}

TEST(TextCli, ChatReplReadsPipedStdin) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r =
        run_cli({"chat", "--temp", "0", "-n", "32", "--timings"}, "What is the capital of France?\nAnd of Italy?\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Rome"), std::string::npos) << r.out;
    // The second turn reuses the first turn's tokens instead of recomputing them.
    const auto second = r.err.rfind("timings:");
    ASSERT_NE(second, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("(0 reused)", second), std::string::npos) << r.err;
}

TEST(TextCli, SeededSamplingIsReproducible) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::vector<std::string> args{"generate", "-p",  "Once upon a time", "-n", "16",
                                        "--temp",   "1.0", "--seed",           "11"};
    const auto a = run_cli(args);
    const auto b = run_cli(args);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    auto other = args;
    other.back() = "12";
    EXPECT_NE(a.out, run_cli(other).out);
}

TEST(TextCli, StopStringAndTimings) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r =
        run_cli({"generate", "-p", "The capital of France is", "-n", "16", "--temp", "0", "--stop", ".", "--timings"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, " Paris\n");
    EXPECT_NE(r.err.find("time to first token"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("stop: stop_string"), std::string::npos) << r.err;
}

TEST(TextCli, BadInputsAreOneLineErrors) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    struct Case {
        std::vector<std::string> args;
        int exit_code;
    };
    const std::vector<Case> cases = {
        {{"generate", "-p", "hi", "--temp", "-1"}, 2},
        {{"generate", "-p", "hi", "--top-p", "2"}, 2},
        {{"generate", "-p", "hi", "--logit-bias", "nonsense"}, 2},
        {{"generate", "-p", std::string("bad \xff\xfe bytes")}, 2},
        {{"generate", "-p", "one two three four five six seven eight nine ten eleven twelve", "--ctx", "8"}, 4},
        {{"generate", "-p", "hi", "-m", "/no/such/model.gguf"}, 3},
        {{"generate", "-p", "hi", "--chat-template", "nosuch"}, 2},
        {{"chat", "--ctx", "-3"}, 2},
    };
    for (const auto& c : cases) {
        std::string joined;
        for (const auto& a : c.args) joined += a + " ";
        SCOPED_TRACE(joined);
        const auto r = run_cli(c.args);
        EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
        EXPECT_EQ(r.signal, 0);
        EXPECT_TRUE(r.out.empty()) << r.out;
        ASSERT_FALSE(r.err.empty());
        EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
    }
}

// The library says the model has no template and which ones it renders by name; the CLI adds its flag.
TEST(TextCli, ModelWithoutAChatTemplateAsksForTheFlag) {
    const std::string tiny = fixture_path("tiny/gqa_f32.gguf");
    for (const auto& args :
         std::vector<std::vector<std::string>>{{"generate", "-m", tiny, "--chat", "-p", "hi"}, {"chat", "-m", tiny}}) {
        SCOPED_TRACE(args[0]);
        const auto r = run_cli(args, "hi\n");
        EXPECT_EQ(r.exit_code, 3) << r.err;  // ErrorCode::unsupported
        for (const char* part : {"no chat template", "by name: chatml|llama3|llama3.0", "; pass --chat-template NAME"})
            EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n" << r.err;
    }
}

}  // namespace
}  // namespace kvstash::test
