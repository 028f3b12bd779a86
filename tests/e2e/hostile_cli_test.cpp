// Issue 34 through the CLI: a model directory whose config.json nests 300k deep (a stack overflow in
// `kvstash info -m DIR` before) exits 3, and so do a --grammar file of 100k nested groups and a
// --json-schema file nested 100k deep (crashes before: a malformed input file is exit 3 in README's
// table), each naming the limit. A GGUF whose eos token id is past its vocabulary loads with a warning on
// stderr (silently before).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/gguf_builder.h"
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

// A one-layer Llama GGUF with a 4-token vocabulary whose eos id is `eos_id` (weights zero: `info` only).
std::vector<uint8_t> tiny_llama_gguf(uint32_t eos_id) {
    namespace gv = kvstash::test::gv;
    constexpr uint64_t embd = 8, ff = 16, vocab = 4;
    GgufBuilder b;
    b.add("general.architecture", gv::string("llama"))
        .add("general.name", gv::string("tiny-eos"))
        .add("llama.block_count", gv::u32(1))
        .add("llama.embedding_length", gv::u32(embd))
        .add("llama.feed_forward_length", gv::u32(ff))
        .add("llama.attention.head_count", gv::u32(2))
        .add("llama.attention.head_count_kv", gv::u32(2))
        .add("llama.context_length", gv::u32(64))
        .add("llama.attention.layer_norm_rms_epsilon", gv::f32(1e-5f))
        .add("tokenizer.ggml.model", gv::string("gpt2"))
        .add("tokenizer.ggml.tokens", gv::string_array({"a", "b", "c", "d"}))
        .add("tokenizer.ggml.merges", gv::string_array({}))
        .add("tokenizer.ggml.eos_token_id", gv::u32(eos_id));
    auto tensor = [&](const std::string& name, std::vector<uint64_t> dims) {
        uint64_t n = 1;
        for (const uint64_t d : dims) n *= d;
        b.add_f32_tensor(name, std::move(dims), std::vector<float>(n, 0.0f));
    };
    tensor("token_embd.weight", {embd, vocab});
    tensor("output_norm.weight", {embd});
    tensor("output.weight", {embd, vocab});
    for (const char* t : {"attn_norm", "ffn_norm"}) tensor(std::string("blk.0.") + t + ".weight", {embd});
    for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output"})
        tensor(std::string("blk.0.") + t + ".weight", {embd, embd});
    tensor("blk.0.ffn_gate.weight", {embd, ff});
    tensor("blk.0.ffn_up.weight", {embd, ff});
    tensor("blk.0.ffn_down.weight", {ff, embd});
    return b.build();
}

TEST(HostileCli, EosIdPastTheVocabularyIsAWarning) {
    TempDir dir;
    const std::string past = (dir.path / "eos_past.gguf").string();
    std::vector<uint8_t> bytes = tiny_llama_gguf(5000);
    std::ofstream(past, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    auto r = run_cli({"info", "-m", past});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("kvstash: warning: tokenizer.ggml.eos_token_id is 5000, past the vocabulary's 4 tokens"),
              std::string::npos)
        << r.err;
    // A valid id: no warning.
    const std::string valid = (dir.path / "eos_valid.gguf").string();
    bytes = tiny_llama_gguf(3);
    std::ofstream(valid, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    r = run_cli({"info", "-m", valid});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvstash::test
