// Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf; skipped when absent) through the real CLI, across processes, at a
// length past its 512-token sliding window: `prefill` of 661 tokens in one process, `generate --state` in another,
// bit-identical to one `generate` of the whole text (tokens, and the logits of every generated position via
// --dump-logits).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

std::string gemma3_path() {
    const char* dir = std::getenv("KVSTASH_MODELS_DIR");
    const std::string models = dir != nullptr && *dir != '\0' ? dir : source_dir() + "/models";
    return models + "/gemma-3-270m-q4_k_m.gguf";
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

TEST(Gemma3StateCli, PrefillPastTheWindowThenGenerateFromStateIsBitIdentical) {
    const std::string model = gemma3_path();
    if (!fs::exists(model)) GTEST_SKIP() << model << " not found: run scripts/fetch_model.sh gemma3";
    const fs::path dir = fs::temp_directory_path() / ("kvstash_gemma3_cli_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const auto path = [&](const std::string& name) { return (dir / name).string(); };
    const std::string prefix = read_bytes(fixture_path("text/persuasion_ch1-2.txt")).substr(0, 2600);
    const std::string suffix = " a";
    const auto whole_ids = run_cli({"tokenize", "-m", model, "-p", prefix + suffix});
    const auto prefix_ids = run_cli({"tokenize", "-m", model, "-p", prefix});
    const auto suffix_ids = run_cli({"tokenize", "-m", model, "-p", suffix});
    ASSERT_EQ(whole_ids.exit_code, 0) << whole_ids.err;
    ASSERT_EQ(suffix_ids.out.substr(0, 2), "2 ");  // BOS, which a continuation does not repeat
    ASSERT_EQ(whole_ids.out, prefix_ids.out.substr(0, prefix_ids.out.size() - 1) + suffix_ids.out.substr(1))
        << "the test's split is not at a token boundary";

    const auto prefill = run_cli({"prefill", "-m", model, "-p", prefix, "-o", path("t.kvs")});
    ASSERT_EQ(prefill.exit_code, 0) << prefill.err;
    EXPECT_NE((prefill.out + prefill.err).find("661 tokens"), std::string::npos) << prefill.out << prefill.err;
    const auto full = run_cli({"generate", "-m", model, "-p", prefix + suffix, "-n", "8", "--temp", "0.9", "--seed",
                               "5", "--dump-logits", path("full.bin")});
    const auto cont = run_cli({"generate", "-m", model, "--state", path("t.kvs"), "-p", suffix, "-n", "8", "--temp",
                               "0.9", "--seed", "5", "--dump-logits", path("cont.bin")});
    ASSERT_EQ(full.exit_code, 0) << full.err;
    ASSERT_EQ(cont.exit_code, 0) << cont.err;
    EXPECT_EQ(full.out, cont.out);
    EXPECT_FALSE(read_bytes(path("full.bin")).empty());
    EXPECT_TRUE(read_bytes(path("full.bin")) == read_bytes(path("cont.bin")))
        << "logits or tokens differ after save/load in a fresh process";
    fs::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::test
