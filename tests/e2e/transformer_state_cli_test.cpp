// qwen2 and gpt2 (tests/fixtures/{qwen2,gpt2}) through the real CLI, across processes: prefill in one
// process, `generate --state` in another, bit-identical to one `generate` of the whole text (tokens and
// the logits of every generated position, via --dump-logits). gpt2's learned positions end at its
// table (64 here): a longer context is refused with a message that names it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

class TransformerStateCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_transformer_cli_" + std::to_string(getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    fs::path dir_;
};

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

// Short enough for gpt2's 64 positions with 16 generated tokens.
const std::string prefix = "It is a truth";
const std::string suffix = " universally known";

TEST_F(TransformerStateCli, PrefillThenGenerateFromStateIsBitIdentical) {
    for (const char* name : {"qwen2/qwen2_f32", "qwen2/qwen2_q8_0", "gpt2/gpt2_f32", "gpt2/gpt2_q8_0"}) {
        SCOPED_TRACE(name);
        const std::string model = fixture_path(std::string(name) + ".gguf");
        const auto whole_ids = run_cli({"tokenize", "-m", model, "-p", prefix + suffix});
        const auto prefix_ids = run_cli({"tokenize", "-m", model, "-p", prefix});
        const auto suffix_ids = run_cli({"tokenize", "-m", model, "-p", suffix});
        ASSERT_EQ(whole_ids.exit_code, 0) << whole_ids.err;
        ASSERT_EQ(whole_ids.out, prefix_ids.out.substr(0, prefix_ids.out.size() - 1) + " " + suffix_ids.out)
            << "the test's split is not at a token boundary";

        const auto prefill = run_cli({"prefill", "-m", model, "-p", prefix, "-o", path("t.kvs")});
        ASSERT_EQ(prefill.exit_code, 0) << prefill.err;
        const auto full = run_cli({"generate", "-m", model, "-p", prefix + suffix, "-n", "16", "--temp", "0.9",
                                   "--seed", "5", "--dump-logits", path("full.bin")});
        const auto cont = run_cli({"generate", "-m", model, "--state", path("t.kvs"), "-p", suffix, "-n", "16",
                                   "--temp", "0.9", "--seed", "5", "--dump-logits", path("cont.bin")});
        ASSERT_EQ(full.exit_code, 0) << full.err;
        ASSERT_EQ(cont.exit_code, 0) << cont.err;
        EXPECT_EQ(full.out, cont.out);
        EXPECT_FALSE(read_bytes(path("full.bin")).empty());
        EXPECT_TRUE(read_bytes(path("full.bin")) == read_bytes(path("cont.bin")))
            << "logits or tokens differ after save/load in a fresh process";
    }
}

TEST_F(TransformerStateCli, Gpt2ContextBeyondItsPositionTableIsRefused) {
    const std::string model = fixture_path("gpt2/gpt2_f32.gguf");
    const auto r = run_cli({"generate", "-m", model, "-p", prefix, "-n", "4", "--ctx", "65"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(r.signal, 0);
    EXPECT_NE(r.err.find("64 positions"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvstash::test
