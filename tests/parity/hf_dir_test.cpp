// `-m DIR`: tiny Hugging Face model directories (tests/fixtures/hf/, made by tests/reference/make_hf_checkpoints.py:
// llama f32 and f16, llama f32 with Llama 3.1 rope scaling, qwen2 f32 sharded into three files, gpt2 f32, gemma3 bf16)
// against
// - transformers fp32 logits of the same directory (the tolerance of the GGUF parity tests: (K + 8·T)·u of
//   max|ref| per position, ×4 as for the Gemma 3 fixtures);
// - the GGUF llama.cpp's converter made of the same directory (--outtype the directory's dtype): the logits
//   bitwise equal, the model fingerprint equal, the vocabulary equal, the chat template equal;
// - transformers' tokenizer (AutoTokenizer.from_pretrained(dir)) on a few strings.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "format/gguf.h"
#include "kvstash/error.h"
#include "kvstash/state_file.h"
#include "kvstash/tokenizer.h"
#include "model/model_access.h"
#include "state/fingerprint.h"
#include "support/eval_helpers.h"
#include "support/paths.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/vocabulary.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;
constexpr double kUnit = 0x1p-24;

std::vector<std::string> fixture_names() {
    std::vector<std::string> names;
    for (const std::string& f : fixture_files("hf", ".json")) names.push_back(fs::path(f).stem().string());
    return names;
}

ModelFingerprint fingerprint_of(const Model& m) { return compute_model_fingerprint(*ModelAccess::impl(m).file); }

TEST(HfDir, FixturesArePresent) {
    const auto names = fixture_names();
    EXPECT_EQ(names.size(), 6u) << "expected the fixtures of tests/reference/make_hf_checkpoints.py";
    EXPECT_TRUE(fs::exists(fixture_path("hf/qwen2_f32_sharded/model.safetensors.index.json")));
}

TEST(HfDir, LogitsMatchTransformers) {
    for (const std::string& name : fixture_names()) {
        SCOPED_TRACE(name);
        const auto j = load_json(fixture_path("hf/" + name + ".json"));
        auto model = Model::load(fixture_path("hf/" + name));
        const auto V = static_cast<size_t>(model->n_vocab());
        const int64_t n_ff = ModelAccess::impl(*model).config.n_ff;
        const auto& sequences = j.at("sequences");
        for (size_t s = 0; s < sequences.size(); ++s) {
            const auto tokens = sequences[s].get<std::vector<int32_t>>();
            const auto& ref = j.at("logits")[s];
            const double bound = 4.0 * (static_cast<double>(n_ff) + 8.0 * static_cast<double>(tokens.size())) * kUnit;
            const auto ours = eval_logits(model, tokens, {static_cast<int64_t>(tokens.size())}, 2, KvType::f32);
            const double worst = worst_row_relative_error(ref, ours, V);
            std::printf("%s sequence %zu: max |ours - transformers| / max|ref| = %.3g (bound %.3g)\n", name.c_str(), s,
                        worst, bound);
            EXPECT_LE(worst, bound);
        }
    }
}

TEST(HfDir, LogitsBitwiseEqualTheConvertedGguf) {
    for (const std::string& name : fixture_names()) {
        SCOPED_TRACE(name);
        const auto j = load_json(fixture_path("hf/" + name + ".json"));
        auto dir = Model::load(fixture_path("hf/" + name));
        auto gguf = Model::load(fixture_path("hf/" + name + ".gguf"));
        for (const auto& seq : j.at("sequences")) {
            const auto tokens = seq.get<std::vector<int32_t>>();
            for (KvType kv : {KvType::f32, KvType::f16}) {
                const auto a = eval_logits(dir, tokens, {5, 3}, 2, kv);
                const auto b = eval_logits(gguf, tokens, {5, 3}, 2, kv);
                ASSERT_EQ(a.size(), b.size());
                EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
            }
        }
    }
}

TEST(HfDir, FingerprintEqualsTheConvertedGgufAndDiffersBetweenModels) {
    std::vector<std::string> seen;
    for (const std::string& name : fixture_names()) {
        SCOPED_TRACE(name);
        auto dir = Model::load(fixture_path("hf/" + name));
        auto again = Model::load(fixture_path("hf/" + name));
        auto gguf = Model::load(fixture_path("hf/" + name + ".gguf"));
        const std::string fp = fingerprint_of(*dir).hex();
        EXPECT_EQ(fp, fingerprint_of(*gguf).hex());
        EXPECT_EQ(fp, fingerprint_of(*again).hex());
        EXPECT_EQ(model_fingerprint(*dir), fp);
        EXPECT_EQ(std::count(seen.begin(), seen.end(), fp), 0);
        seen.push_back(fp);
    }
}

TEST(HfDir, FingerprintChangesWithOneWeight) {
    const fs::path tmp = fs::temp_directory_path() / ("kvstash_hf_fp_" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    fs::copy(fixture_path("hf/llama_f32"), tmp, fs::copy_options::recursive);
    // model_fingerprint: through the cache, keyed on the directory's files, so a stale key would show here.
    const std::string before = model_fingerprint(*Model::load(tmp.string()));
    EXPECT_EQ(before, fingerprint_of(*Model::load(tmp.string())).hex());
    {
        // The last byte of the file is the last weight's most significant byte.
        std::fstream f(tmp / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(-1, std::ios::end);
        const char c = static_cast<char>(f.get() ^ 0x01);
        f.seekp(-1, std::ios::end);
        f.put(c);
    }
    const std::string after = model_fingerprint(*Model::load(tmp.string()));
    EXPECT_EQ(after, fingerprint_of(*Model::load(tmp.string())).hex());
    fs::remove_all(tmp);
    EXPECT_NE(before, after);
}

// --quantize q8_0 equals convert_hf_to_gguf.py --outtype q8_0 of the same directory: ffn_down's 48-wide rows are
// not whole 32-blocks, so both keep it f16.
TEST(HfDir, QuantizeQ8_0EqualsTheConvertersQ8_0) {
    auto dir = Model::load(fixture_path("hf/llama_f32"), ModelLoadOptions{LoadQuantization::q8_0});
    auto gguf = Model::load(fixture_path("hf/llama_f32.q8_0.gguf"));
    const gguf::File& file = *ModelAccess::impl(*dir).file;
    EXPECT_EQ(file.find_tensor("blk.0.attn_q.weight")->type, TensorType::Q8_0);
    EXPECT_EQ(file.find_tensor("token_embd.weight")->type, TensorType::Q8_0);
    EXPECT_EQ(file.find_tensor("blk.0.ffn_down.weight")->type, TensorType::F16);
    EXPECT_EQ(file.find_tensor("blk.0.attn_norm.weight")->type, TensorType::F32);
    EXPECT_EQ(fingerprint_of(*dir).hex(), fingerprint_of(*gguf).hex());
    EXPECT_NE(fingerprint_of(*dir).hex(), fingerprint_of(*Model::load(fixture_path("hf/llama_f32"))).hex());
    const auto tokens = load_json(fixture_path("hf/llama_f32.json")).at("sequences")[0].get<std::vector<int32_t>>();
    const auto a = eval_logits(dir, tokens, {7}, 2, KvType::f32);
    const auto b = eval_logits(gguf, tokens, {7}, 2, KvType::f32);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(HfDir, QuantizeIsRefusedForAGgufFile) {
    try {
        Model::load(fixture_path("hf/llama_f32.gguf"), ModelLoadOptions{LoadQuantization::q8_0});
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    }
}

TEST(HfDir, TokenizerEqualsTheConvertedGgufAndTransformers) {
    for (const std::string& name : fixture_names()) {
        SCOPED_TRACE(name);
        const auto j = load_json(fixture_path("hf/" + name + ".json"));
        auto dir = Model::load(fixture_path("hf/" + name));
        auto gguf = Model::load(fixture_path("hf/" + name + ".gguf"));
        const Vocabulary& a = TokenizerAccess::vocabulary(dir->tokenizer());
        const Vocabulary& b = TokenizerAccess::vocabulary(gguf->tokenizer());
        EXPECT_EQ(a.model, b.model);
        EXPECT_EQ(a.pre, b.pre);
        EXPECT_EQ(a.pre, j.at("pre").get<std::string>());
        EXPECT_EQ(a.tokens, b.tokens);
        EXPECT_EQ(a.token_types, b.token_types);
        EXPECT_EQ(a.merges, b.merges);
        EXPECT_EQ(a.bos_id, b.bos_id);
        EXPECT_EQ(a.eos_id, b.eos_id);
        EXPECT_EQ(a.add_bos, b.add_bos);
        EXPECT_EQ(ModelAccess::impl(*dir).file->get_string("tokenizer.chat_template"),
                  ModelAccess::impl(*gguf).file->get_string("tokenizer.chat_template"));
        const auto& texts = j.at("texts");
        for (size_t i = 0; i < texts.size(); ++i) {
            const auto text = texts[i].get<std::string>();
            EXPECT_EQ(dir->tokenizer().encode(text, AddSpecial::no, ParseSpecial::yes),
                      j.at("token_ids")[i].get<std::vector<int32_t>>())
                << text;
        }
    }
}

}  // namespace
}  // namespace kvstash::test
