// `-m DIR` through the real CLI (tests/fixtures/hf/, made by tests/reference/make_hf_checkpoints.py): `info` and
// `generate` work on a Hugging Face directory and give the converted GGUF's answer bit for bit (tokens and the
// logits of every generated position); a state prefilled with the directory is accepted by the GGUF, and the other
// way round, continuing bit-identically (the two have one model fingerprint).
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

class HfDirCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_hf_dir_cli_" + std::to_string(getpid()));
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

const std::string prefix = "It is a truth";
const std::string suffix = " universally known";

TEST_F(HfDirCli, InfoDescribesTheDirectory) {
    const auto r = run_cli({"info", "-m", fixture_path("hf/qwen2_f32_sharded")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Hugging Face directory"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("qwen2"), std::string::npos) << r.out;
}

TEST_F(HfDirCli, GenerateEqualsTheConvertedGguf) {
    for (const char* name : {"llama_f32", "qwen2_f32_sharded", "gpt2_f32", "gemma3_bf16", "llama_f16"}) {
        SCOPED_TRACE(name);
        const std::string dir = fixture_path(std::string("hf/") + name);
        const auto a = run_cli({"generate", "-m", dir, "-p", prefix, "-n", "8", "--temp", "0.9", "--seed", "3",
                                "--dump-logits", path("dir.bin")});
        const auto b = run_cli({"generate", "-m", dir + ".gguf", "-p", prefix, "-n", "8", "--temp", "0.9", "--seed",
                                "3", "--dump-logits", path("gguf.bin")});
        ASSERT_EQ(a.exit_code, 0) << a.err;
        ASSERT_EQ(b.exit_code, 0) << b.err;
        EXPECT_EQ(a.out, b.out);
        EXPECT_FALSE(read_bytes(path("dir.bin")).empty());
        EXPECT_TRUE(read_bytes(path("dir.bin")) == read_bytes(path("gguf.bin")));
    }
}

TEST_F(HfDirCli, StatesCrossBetweenDirectoryAndGguf) {
    const std::string dir = fixture_path("hf/llama_f32");
    const std::string gguf = dir + ".gguf";
    for (const auto& [from, to] : {std::pair{dir, gguf}, std::pair{gguf, dir}}) {
        SCOPED_TRACE(from + " -> " + to);
        const auto prefill = run_cli({"prefill", "-m", from, "-p", prefix, "-o", path("t.kvs")});
        ASSERT_EQ(prefill.exit_code, 0) << prefill.err;
        const auto cont = run_cli({"generate", "-m", to, "--state", path("t.kvs"), "-p", suffix, "-n", "8", "--temp",
                                   "0.9", "--seed", "5", "--dump-logits", path("cont.bin")});
        const auto full = run_cli({"generate", "-m", to, "-p", prefix + suffix, "-n", "8", "--temp", "0.9", "--seed",
                                   "5", "--dump-logits", path("full.bin")});
        ASSERT_EQ(cont.exit_code, 0) << cont.err;
        ASSERT_EQ(full.exit_code, 0) << full.err;
        EXPECT_EQ(cont.out, full.out);
        EXPECT_TRUE(read_bytes(path("cont.bin")) == read_bytes(path("full.bin")));
    }
    // A different model's directory refuses the state.
    const auto prefill = run_cli({"prefill", "-m", dir, "-p", prefix, "-o", path("t.kvs")});
    ASSERT_EQ(prefill.exit_code, 0) << prefill.err;
    const auto other =
        run_cli({"generate", "-m", fixture_path("hf/llama_f16"), "--state", path("t.kvs"), "-p", suffix, "-n", "2"});
    EXPECT_NE(other.exit_code, 0);
    EXPECT_NE(other.err.find("fingerprint"), std::string::npos) << other.err;
}

}  // namespace
}  // namespace kvstash::test
