// `kvstash generate --cache-dir` across processes: a second run of the same prompt reuses the first
// run's KV blocks from disk and produces the same text and byte-identical logits (--dump-logits) as the
// cold first run; damaged cache files and another model's runs on the same directory change nothing but
// the amount of reuse; a hybrid model's third request reuses up to where the second left the first, inside
// a block; flags that do not combine are usage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

class CacheCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_cache_cli_" + std::to_string(getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    std::vector<fs::path> block_files() const {
        std::vector<fs::path> files;
        for (const auto& entry : fs::directory_iterator(dir_ / "cache")) {
            if (entry.path().extension() == ".kvb") files.push_back(entry.path());
        }
        return files;
    }
    fs::path dir_;
};

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

// N from the "tokens: N reused from the cache, M computed" line; -1 when absent.
long long reused_from_cache(const std::string& err) {
    const size_t at = err.find("tokens: ");
    long long reused = -1, computed = -1;
    if (at == std::string::npos ||
        std::sscanf(err.c_str() + at, "tokens: %lld reused from the cache, %lld computed", &reused, &computed) != 2) {
        return -1;
    }
    return reused;
}

// 69 tokens with the default model's tokenizer: two full 32-token KV blocks and 5 more.
const std::string prompt =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a "
    "wife. "
    "However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth "
    "is so "
    "well fixed in the minds of the surrounding families, that he is considered as the rightful property of";

std::vector<std::string> generate_args(const std::string& cache_dir, const std::string& dump) {
    return {"generate",    "-p",      prompt,          "-n", "16",       "--temp", "0",
            "--cache-dir", cache_dir, "--dump-logits", dump, "--timings"};
}

TEST_F(CacheCli, ASecondProcessReusesTheFirstOnesWorkBitExactly) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto cold = run_cli(generate_args(path("cache"), path("cold.bin")));
    ASSERT_EQ(cold.exit_code, 0) << cold.err;
    EXPECT_EQ(reused_from_cache(cold.err), 0) << cold.err;
    EXPECT_NE(cold.err.find("cache: "), std::string::npos) << "--timings prints the cache's counters\n" << cold.err;
    EXPECT_FALSE(block_files().empty());

    const auto warm = run_cli(generate_args(path("cache"), path("warm.bin")));
    ASSERT_EQ(warm.exit_code, 0) << warm.err;
    const long long reused = reused_from_cache(warm.err);
    EXPECT_GE(reused, 64) << warm.err;  // the prompt's two full blocks, read from disk
    EXPECT_EQ(reused % 32, 0) << "a new process reuses whole blocks from disk";
    EXPECT_EQ(cold.out, warm.out);
    const std::string cold_bytes = read_bytes(path("cold.bin"));
    EXPECT_EQ(cold_bytes.size(), 16u * (4u + 49152u * 4u));
    EXPECT_TRUE(cold_bytes == read_bytes(path("warm.bin")))
        << "logits or tokens differ when the prefix comes from the disk cache";

    // The same prompt without any cache: the same text (the cache changes nothing but the work).
    const auto plain = run_cli({"generate", "-p", prompt, "-n", "16", "--temp", "0"});
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_EQ(plain.out, cold.out);
}

TEST_F(CacheCli, DamagedFilesAndAnotherModelOnTheDirectoryChangeNothingButReuse) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto cold = run_cli(generate_args(path("cache"), path("cold.bin")));
    ASSERT_EQ(cold.exit_code, 0) << cold.err;
    // Another model (a tiny test model) adds its own blocks to the same directory.
    const auto before = block_files().size();
    const auto tiny = run_cli({"generate", "-m", fixture_path("tiny/gqa_f32.gguf"), "-p", prompt.substr(0, 100), "-n",
                               "2", "--cache-dir", path("cache")});
    ASSERT_EQ(tiny.exit_code, 0) << tiny.err;
    EXPECT_EQ(reused_from_cache(tiny.err), 0) << tiny.err;
    EXPECT_GT(block_files().size(), before);

    // Every block file damaged in its middle.
    for (const fs::path& file : block_files()) {
        std::string bytes = read_bytes(file.string());
        bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x40);
        std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    }
    const auto damaged = run_cli(generate_args(path("cache"), path("damaged.bin")));
    ASSERT_EQ(damaged.exit_code, 0) << damaged.err;
    EXPECT_EQ(reused_from_cache(damaged.err), 0) << damaged.err;
    EXPECT_NE(damaged.err.find(" 1 rejected"), std::string::npos) << damaged.err;
    EXPECT_EQ(damaged.out, cold.out);
    EXPECT_TRUE(read_bytes(path("cold.bin")) == read_bytes(path("damaged.bin")));

    // That run deleted the block it refused (the first: a lookup stops there) and wrote it again: the
    // next run reuses it, and refuses the next damaged one.
    const auto repaired = run_cli(generate_args(path("cache"), path("repaired.bin")));
    ASSERT_EQ(repaired.exit_code, 0) << repaired.err;
    EXPECT_EQ(reused_from_cache(repaired.err), 32) << repaired.err;
    EXPECT_EQ(repaired.out, cold.out);
    EXPECT_TRUE(read_bytes(path("cold.bin")) == read_bytes(path("repaired.bin")));
}

// Token ids of `text` for `model` (`kvstash tokenize`).
std::vector<std::string> token_ids(const std::string& model, const std::string& text) {
    const auto result = run_cli({"tokenize", "-m", model, "-p", text});
    EXPECT_EQ(result.exit_code, 0) << result.err;
    std::vector<std::string> ids;
    std::istringstream in(result.out);
    for (std::string id; in >> id;) ids.push_back(id);
    return ids;
}

size_t common_prefix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
    return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

// Issue 13's A/B/C on the tiny hybrid (Mamba-2 + attention), one process per request: B and C share D
// tokens with A, D not a multiple of 32. B learns from the directory (the list of blocks after its last
// full block) where it leaves A and has a checkpoint taken there; C reuses all D tokens, and its text and
// logits are those of a run without the cache.
TEST_F(CacheCli, AHybridThirdProcessReusesTheDivergencePoint) {
    const std::string model = fixture_path("recurrent/granitehybrid_f32.gguf");
    std::ifstream in(fixture_path("text/persuasion_ch1-2.txt"));
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    const std::string a = text.substr(0, 1200);
    const std::string b = text.substr(0, 719) + text.substr(text.find(' ', 5000), 300);
    const std::string c = text.substr(0, 719) + text.substr(text.find(' ', 9000), 300);
    const size_t shared = common_prefix(token_ids(model, a), token_ids(model, b));
    ASSERT_EQ(shared, common_prefix(token_ids(model, b), token_ids(model, c)));
    ASSERT_NE(shared % 32, 0u) << "the test wants a divergence inside a block";
    const auto run = [&](const std::string& prompt, const std::string& dump, bool cached) {
        std::vector<std::string> args = {"generate", "-m", model,           "-p",      prompt, "-n", "4",
                                         "--temp",   "0",  "--dump-logits", path(dump)};
        if (cached) args.insert(args.end(), {"--cache-dir", path("cache")});
        const auto result = run_cli(args);
        EXPECT_EQ(result.exit_code, 0) << result.err;
        return result;
    };
    EXPECT_EQ(reused_from_cache(run(a, "a.bin", true).err), 0);
    const long long b_reused = reused_from_cache(run(b, "b.bin", true).err);
    EXPECT_GT(b_reused, 0);
    EXPECT_LT(b_reused, static_cast<long long>(shared));
    const auto warm = run(c, "c.bin", true);
    const auto cold = run(c, "c_cold.bin", false);
    EXPECT_EQ(reused_from_cache(warm.err), static_cast<long long>(shared)) << warm.err;
    EXPECT_EQ(warm.out, cold.out);
    EXPECT_TRUE(read_bytes(path("c.bin")) == read_bytes(path("c_cold.bin")))
        << "logits differ when the prefix and its checkpoint come from the disk cache";
}

TEST_F(CacheCli, FlagsThatDoNotCombineAreUsageErrors) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    ASSERT_EQ(run_cli({"prefill", "-p", "Hello there", "-o", path("p.kvs")}).exit_code, 0);
    const auto with_state =
        run_cli({"generate", "--state", path("p.kvs"), "-p", " x", "-n", "2", "--cache-dir", path("cache")});
    EXPECT_EQ(with_state.exit_code, 2) << with_state.err;
    EXPECT_NE(with_state.err.find("--state"), std::string::npos) << with_state.err;
    const auto ram_alone = run_cli({"generate", "-p", "x", "-n", "2", "--cache-ram", "64"});
    EXPECT_EQ(ram_alone.exit_code, 2) << ram_alone.err;
    // A cache directory that cannot be a directory: a bad-input error naming it, not a crash.
    std::ofstream(path("file")) << "not a directory";
    const auto not_dir = run_cli({"generate", "-p", "x", "-n", "2", "--cache-dir", path("file")});
    EXPECT_EQ(not_dir.exit_code, 3) << not_dir.err;
    EXPECT_NE(not_dir.err.find(path("file")), std::string::npos) << not_dir.err;
}

}  // namespace
}  // namespace kvstash::test
