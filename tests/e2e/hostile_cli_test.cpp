// Issue 34 through the CLI: a model directory whose config.json nests 300k deep (a stack overflow in
// `kvstash info -m DIR` before) exits 3, and so do a --grammar file of 100k nested groups and a
// --json-schema file nested 100k deep (crashes before: a malformed input file is exit 3 in README's
// table), each naming the limit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

std::string repeat(const std::string& s, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
}

struct TempDir {
    fs::path path = fs::temp_directory_path() / ("kvstash_hostile_cli_" + std::to_string(getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(path, ignored);
    }
    std::string write(const std::string& name, const std::string& text) const {
        std::ofstream(path / name, std::ios::binary) << text;
        return (path / name).string();
    }
};

TEST(HostileCli, DeepConfigJsonExits3) {
    TempDir dir;
    const fs::path model = dir.path / "model";
    fs::copy(fixture_path("hf/qwen2_f32_sharded"), model, fs::copy_options::recursive);
    std::ofstream(model / "config.json", std::ios::trunc)
        << R"({"architectures": ["Qwen2ForCausalLM"], "x": )" + repeat("[", 300000) + repeat("]", 300000) + "}";
    const auto r = run_cli({"info", "-m", model.string()});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("deeper than 256 levels"), std::string::npos) << r.err;
}

TEST(HostileCli, DeepGrammarAndSchemaFilesExit3) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    TempDir dir;
    const std::string grammar =
        dir.write("deep.gbnf", "root ::= " + repeat("(", 100000) + "\"x\"" + repeat(")", 100000) + "\n");
    auto r = run_cli({"generate", "-m", default_model_path(), "-p", "hi", "-n", "1", "--grammar", grammar});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("nested deeper than 256"), std::string::npos) << r.err;
    const std::string schema = dir.write("deep.json", repeat("[", 100000) + repeat("]", 100000));
    r = run_cli({"generate", "-m", default_model_path(), "-p", "hi", "-n", "1", "--json-schema", schema});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("deeper than 256"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvstash::test
