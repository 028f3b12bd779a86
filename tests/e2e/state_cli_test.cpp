// The state workflow through the real CLI, across processes: prefill in one process, continue in
// another, and check that the continuation is bit-identical to computing everything in one pass
// (same tokens, same logits at every generated position, via --dump-logits).
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

class StateCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_state_cli_" + std::to_string(getpid()));
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

// A prefix and suffix whose tokens concatenate to the tokens of prefix + suffix (a pre-token boundary).
const std::string prefix =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a "
    "wife.";
const std::string suffix = " However little known the feelings or views of such a man may be";

TEST_F(StateCli, ContinuationInAFreshProcessIsBitIdentical) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto whole_ids = run_cli({"tokenize", "-p", prefix + suffix});
    const auto prefix_ids = run_cli({"tokenize", "-p", prefix});
    const auto suffix_ids = run_cli({"tokenize", "-p", suffix});
    ASSERT_EQ(whole_ids.exit_code, 0) << whole_ids.err;
    ASSERT_EQ(whole_ids.out, prefix_ids.out.substr(0, prefix_ids.out.size() - 1) + " " + suffix_ids.out)
        << "the test's split is not at a token boundary";

    const auto prefill = run_cli({"prefill", "-p", prefix, "-o", path("prefix.kvs")});
    ASSERT_EQ(prefill.exit_code, 0) << prefill.err;
    EXPECT_NE(prefill.out.find("tokens"), std::string::npos) << prefill.out;

    for (const std::vector<std::string>& sampling :
         {std::vector<std::string>{"--temp", "0"},
          std::vector<std::string>{"--temp", "0.9", "--seed", "7", "--top-k", "0"}}) {
        SCOPED_TRACE(sampling[1]);
        std::vector<std::string> full{"generate", "-p", prefix + suffix, "-n", "24", "--dump-logits", path("full.bin")};
        std::vector<std::string> cont{"generate", "--state",       path("prefix.kvs"), "-p", suffix, "-n",
                                      "24",       "--dump-logits", path("cont.bin")};
        full.insert(full.end(), sampling.begin(), sampling.end());
        cont.insert(cont.end(), sampling.begin(), sampling.end());
        const auto a = run_cli(full);
        const auto c = run_cli(cont);
        ASSERT_EQ(a.exit_code, 0) << a.err;
        ASSERT_EQ(c.exit_code, 0) << c.err;
        EXPECT_EQ(a.out, c.out);
        EXPECT_NE(c.err.find("reused"), std::string::npos) << c.err;
        const std::string full_bytes = read_bytes(path("full.bin"));
        EXPECT_EQ(full_bytes.size(), 24u * (4u + 49152u * 4u));
        EXPECT_TRUE(full_bytes == read_bytes(path("cont.bin")))
            << "logits or tokens differ after save/load in a fresh process";
    }
}

TEST_F(StateCli, SeveralContinuationsFromOneLoad) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    ASSERT_EQ(run_cli({"prefill", "-p", prefix, "-o", path("p.kvs")}).exit_code, 0);
    const auto r = run_cli(
        {"generate", "--state", path("p.kvs"), "-p", " However", "-p", " But", "-p", " So", "-n", "8", "--temp", "0"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    size_t lines = 0;
    for (char ch : r.out) lines += ch == '\n';
    EXPECT_EQ(lines, 6u) << "a header line and a text line per continuation:\n" << r.out;
    EXPECT_NE(r.out.find("--- continuation 3/3 ---\n"), std::string::npos) << r.out;
}

TEST_F(StateCli, StateInfoVerifiesChecksums) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    ASSERT_EQ(run_cli({"prefill", "-p", prefix, "-o", path("p.kvs")}).exit_code, 0);
    const auto ok = run_cli({"state", "info", path("p.kvs")});
    ASSERT_EQ(ok.exit_code, 0) << ok.err;
    EXPECT_NE(ok.out.find("checksums:     ok"), std::string::npos) << ok.out;
    EXPECT_NE(ok.out.find("bit-exact"), std::string::npos) << ok.out;
    EXPECT_NE(ok.out.find("chat session:  no"), std::string::npos) << ok.out;

    std::string bytes = read_bytes(path("p.kvs"));
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
    std::ofstream(path("bad.kvs"), std::ios::binary) << bytes;
    const auto bad = run_cli({"state", "info", path("bad.kvs")});
    EXPECT_NE(bad.exit_code, 0);
    const auto load_bad = run_cli({"generate", "--state", path("bad.kvs"), "-p", " x", "-n", "2"});
    EXPECT_EQ(load_bad.exit_code, 3) << load_bad.err;
    EXPECT_NE(load_bad.err.find("checksum"), std::string::npos) << load_bad.err;
}

TEST_F(StateCli, Q8StateIsSmallerAndSaysItIsNotExact) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    ASSERT_EQ(run_cli({"prefill", "-p", prefix, "-o", path("f16.kvs")}).exit_code, 0);
    const auto q8 = run_cli({"prefill", "-p", prefix, "-o", path("q8.kvs"), "--file-kv-type", "q8_0"});
    ASSERT_EQ(q8.exit_code, 0) << q8.err;
    EXPECT_NE(q8.err.find("not bit-exactly"), std::string::npos) << q8.err;
    EXPECT_LT(fs::file_size(path("q8.kvs")), fs::file_size(path("f16.kvs")) * 7 / 10);
    const auto info = run_cli({"state", "info", path("q8.kvs")});
    EXPECT_NE(info.out.find("not bit-exact"), std::string::npos) << info.out;
    EXPECT_EQ(run_cli({"generate", "--state", path("q8.kvs"), "-p", suffix, "-n", "4"}).exit_code, 0);
}

// A q8_0 cache (--kv-type q8_0, docs/kv-cache.md): its state file is exact, so continuing it in a fresh
// process gives the bits of the one-pass q8_0 run; `state info` says q8_0 and bit-exact; --kv-type is
// refused beside --state (the file fixes the cache type: no silent conversion to f16).
TEST_F(StateCli, Q8CacheStateContinuesBitIdentically) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto prefill = run_cli({"prefill", "-p", prefix, "-o", path("q8cache.kvs"), "--kv-type", "q8_0"});
    ASSERT_EQ(prefill.exit_code, 0) << prefill.err;
    EXPECT_EQ(prefill.err.find("not bit-exactly"), std::string::npos) << prefill.err;
    const auto info = run_cli({"state", "info", path("q8cache.kvs")});
    EXPECT_NE(info.out.find("kv:            q8_0"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("(bit-exact)"), std::string::npos) << info.out;
    const auto full = run_cli({"generate", "-p", prefix + suffix, "-n", "16", "--temp", "0", "--kv-type", "q8_0",
                               "--dump-logits", path("full.bin")});
    const auto cont = run_cli({"generate", "--state", path("q8cache.kvs"), "-p", suffix, "-n", "16", "--temp", "0",
                               "--dump-logits", path("cont.bin")});
    ASSERT_EQ(full.exit_code, 0) << full.err;
    ASSERT_EQ(cont.exit_code, 0) << cont.err;
    EXPECT_EQ(full.out, cont.out);
    EXPECT_TRUE(read_bytes(path("full.bin")) == read_bytes(path("cont.bin"))) << "q8_0 continuation not bit-exact";
    const auto f16 = run_cli({"generate", "--state", path("q8cache.kvs"), "--kv-type", "f16", "-p", suffix});
    EXPECT_NE(f16.exit_code, 0);
    EXPECT_NE(f16.err.find("fixes its context and KV cache type"), std::string::npos) << f16.err;
}

TEST_F(StateCli, SaveAfterGenerationAndResumeTheSampler) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    // One run of 16 tokens vs 8 tokens, save, then 8 more with the saved sampler in a new process.
    const auto whole = run_cli({"generate", "-p", prefix, "-n", "16", "--temp", "0.8", "--seed", "3"});
    const auto first =
        run_cli({"generate", "-p", prefix, "-n", "8", "--temp", "0.8", "--seed", "3", "--save-state", path("g.kvs")});
    ASSERT_EQ(first.exit_code, 0) << first.err;
    const auto second = run_cli({"generate", "--state", path("g.kvs"), "--resume-sampler", "-n", "8"});
    ASSERT_EQ(second.exit_code, 0) << second.err;
    EXPECT_EQ(whole.out, first.out.substr(0, first.out.size() - 1) + second.out);
}

TEST_F(StateCli, BadStateFilesAreClearErrors) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    std::ofstream(path("junk.kvs")) << "definitely not a state file";
    const auto junk = run_cli({"generate", "--state", path("junk.kvs"), "-p", "x", "-n", "2"});
    EXPECT_EQ(junk.exit_code, 3) << junk.err;
    EXPECT_NE(junk.err.find("kvstash: error:"), std::string::npos);
    ASSERT_EQ(run_cli({"prefill", "-p", prefix, "-o", path("p.kvs")}).exit_code, 0);
    std::string bytes = read_bytes(path("p.kvs"));
    std::ofstream(path("short.kvs"), std::ios::binary) << bytes.substr(0, bytes.size() / 3);
    const auto truncated = run_cli({"generate", "--state", path("short.kvs"), "-p", "x", "-n", "2"});
    EXPECT_EQ(truncated.exit_code, 3) << truncated.err;
    EXPECT_EQ(truncated.signal, 0);
    // A state of another model (a tiny test model) is refused.
    const auto tiny = fixture_path("tiny/gqa_f32.gguf");
    ASSERT_EQ(run_cli({"prefill", "-m", tiny, "-p", "hello there", "-o", path("tiny.kvs")}).exit_code, 0);
    const auto wrong = run_cli({"generate", "--state", path("tiny.kvs"), "-p", "x", "-n", "2"});
    EXPECT_NE(wrong.exit_code, 0);
    EXPECT_NE(wrong.err.find("fingerprint"), std::string::npos) << wrong.err;
}

// Models with recurrent layers (tests/fixtures/recurrent): their state files (format version 2) hold
// the recurrent state, so prefill + generate --state continues exactly like one generate.
TEST_F(StateCli, RecurrentModelsContinueBitIdenticallyFromAStateFile) {
    for (const char* name : {"mamba1_f32", "mamba2_f32", "granitehybrid_f32"}) {
        SCOPED_TRACE(name);
        const std::string model = fixture_path(std::string("recurrent/") + name + ".gguf");
        const auto whole_ids = run_cli({"tokenize", "-m", model, "-p", prefix + suffix});
        const auto prefix_ids = run_cli({"tokenize", "-m", model, "-p", prefix});
        const auto suffix_ids = run_cli({"tokenize", "-m", model, "-p", suffix});
        ASSERT_EQ(whole_ids.exit_code, 0) << whole_ids.err;
        ASSERT_EQ(whole_ids.out, prefix_ids.out.substr(0, prefix_ids.out.size() - 1) + " " + suffix_ids.out)
            << "the test's split is not at a token boundary";

        const auto prefill = run_cli({"prefill", "-m", model, "-p", prefix, "-o", path("r.kvs")});
        ASSERT_EQ(prefill.exit_code, 0) << prefill.err;
        const auto full = run_cli({"generate", "-m", model, "-p", prefix + suffix, "-n", "16", "--temp", "0.9",
                                   "--seed", "5", "--dump-logits", path("full.bin")});
        const auto cont = run_cli({"generate", "-m", model, "--state", path("r.kvs"), "-p", suffix, "-n", "16",
                                   "--temp", "0.9", "--seed", "5", "--dump-logits", path("cont.bin")});
        ASSERT_EQ(full.exit_code, 0) << full.err;
        ASSERT_EQ(cont.exit_code, 0) << cont.err;
        EXPECT_EQ(full.out, cont.out);
        EXPECT_FALSE(read_bytes(path("full.bin")).empty());
        EXPECT_TRUE(read_bytes(path("full.bin")) == read_bytes(path("cont.bin")))
            << "logits or tokens differ after save/load in a fresh process";

        const auto info = run_cli({"state", "info", path("r.kvs")});
        ASSERT_EQ(info.exit_code, 0) << info.err;
        EXPECT_NE(info.out.find("format:        version 2"), std::string::npos) << info.out;
        EXPECT_NE(info.out.find("recurrent:     "), std::string::npos) << info.out;
        EXPECT_NE(info.out.find("checkpoints:   none"), std::string::npos) << info.out;
    }
}

TEST_F(StateCli, StateInfoReadsAVersion1File) {
    const auto info = run_cli({"state", "info", fixture_path("state/v1_gqa_f32.kvs")});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find("format:        version 1"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("tokens:        79"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("checksums:     ok"), std::string::npos) << info.out;
    EXPECT_EQ(info.out.find("recurrent:"), std::string::npos) << info.out;
}

}  // namespace
}  // namespace kvstash::test
