// `--quantize q4_K` on a Hugging Face directory: a Llama-shaped directory with 256-wide rows, written here
// (config.json, model.safetensors of seeded f32 weights, the tiny fixture's tokenizer). Every matrix becomes
// q4_K, and each one's bytes are ggml's quantizer (format/quantize.h, checked bitwise against ggml by
// unit_quantize_q4_k) applied row by row to the tensor as the unquantized load presents it (after the q/k
// permutation) — so the quantization sits at the right place in the load pipeline. The quantized model runs,
// close to the unquantized one, under its own fingerprint; a row that is not whole 256-blocks takes q8_0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/quantize.h"
#include "format/tensor_type.h"
#include "kvstash/model.h"
#include "model/model_access.h"
#include "state/fingerprint.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

ModelFingerprint fingerprint_of(const Model& m) { return compute_model_fingerprint(*ModelAccess::impl(m).file); }

struct HfTensor {
    std::string name;
    std::vector<int64_t> shape;  // row-major, as torch
};

// A one-layer LlamaForCausalLM: hidden 256, 4 heads / 2 KV heads of 64, FFN `ffn`, the fixture tokenizer's 320 tokens.
fs::path write_directory(const std::string& tag, int64_t ffn) {
    const fs::path dir = fs::temp_directory_path() / ("kvstash-hf-q4k-" + tag + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
        fs::copy_file(fixture_path(std::string("hf/llama_f32/") + f), dir / f);
    }
    nlohmann::json config = nlohmann::json::parse(std::ifstream(fixture_path("hf/llama_f32/config.json")));
    config["hidden_size"] = 256;
    config["head_dim"] = 64;
    config["intermediate_size"] = ffn;
    config["num_hidden_layers"] = 1;
    std::ofstream(dir / "config.json") << config.dump(2);

    const int64_t vocab = config["vocab_size"].get<int64_t>();
    const std::vector<HfTensor> tensors = {
        {"model.embed_tokens.weight", {vocab, 256}},
        {"model.layers.0.input_layernorm.weight", {256}},
        {"model.layers.0.self_attn.q_proj.weight", {256, 256}},
        {"model.layers.0.self_attn.k_proj.weight", {128, 256}},
        {"model.layers.0.self_attn.v_proj.weight", {128, 256}},
        {"model.layers.0.self_attn.o_proj.weight", {256, 256}},
        {"model.layers.0.post_attention_layernorm.weight", {256}},
        {"model.layers.0.mlp.gate_proj.weight", {ffn, 256}},
        {"model.layers.0.mlp.up_proj.weight", {ffn, 256}},
        {"model.layers.0.mlp.down_proj.weight", {256, ffn}},
        {"model.norm.weight", {256}},
        {"lm_head.weight", {vocab, 256}},
    };
    std::mt19937 rng(20261127);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    nlohmann::json header = nlohmann::json::object();
    std::vector<float> data;
    for (const HfTensor& t : tensors) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        const auto begin = static_cast<int64_t>(data.size()) * 4;
        for (int64_t i = 0; i < n; ++i) data.push_back(t.shape.size() == 1 ? 1.0f + normal(rng) : normal(rng));
        header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, begin + n * 4}}};
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    const uint64_t h_size = h.size();
    std::ofstream out(dir / "model.safetensors", std::ios::binary);
    out.write(reinterpret_cast<const char*>(&h_size), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
    return dir;
}

TEST(HfDirQ4K, EveryMatrixIsGgmlsQ4KOfTheUnquantizedTensor) {
    const fs::path dir = write_directory("256", 512);
    auto plain = Model::load(dir.string());
    auto quant = Model::load(dir.string(), ModelLoadOptions{LoadQuantization::q4_K});
    const gguf::File& pf = *ModelAccess::impl(*plain).file;
    const gguf::File& qf = *ModelAccess::impl(*quant).file;
    int matrices = 0;
    for (const char* name : {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                             "blk.0.attn_output.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
                             "blk.0.ffn_down.weight", "output.weight"}) {
        SCOPED_TRACE(name);
        const gguf::TensorInfo* p = pf.find_tensor(name);
        const gguf::TensorInfo* q = qf.find_tensor(name);
        ASSERT_NE(p, nullptr);
        ASSERT_NE(q, nullptr);
        ASSERT_EQ(p->type, TensorType::F32);
        ASSERT_EQ(q->type, TensorType::Q4_K);
        ASSERT_EQ(p->dims, q->dims);
        const int64_t row = p->dims[0];
        const int64_t rows = static_cast<int64_t>(p->n_bytes / 4) / row;
        const auto* values = reinterpret_cast<const float*>(pf.tensor_data(*p));
        std::vector<uint8_t> want(tensor_row_bytes(TensorType::Q4_K, row) * static_cast<uint64_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
            quantize_row_q4_K(values + r * row, want.data() + tensor_row_bytes(TensorType::Q4_K, row) * r, row);
        }
        ASSERT_EQ(q->n_bytes, want.size());
        EXPECT_EQ(std::memcmp(qf.tensor_data(*q), want.data(), want.size()), 0);
        ++matrices;
    }
    EXPECT_EQ(matrices, 9);
    EXPECT_EQ(qf.find_tensor("blk.0.attn_norm.weight")->type, TensorType::F32);
    EXPECT_NE(fingerprint_of(*quant).hex(), fingerprint_of(*plain).hex());

    // It runs, and stays near the unquantized model: 4-bit weights move these random logits by ~0.2 of their RMS;
    // logits of unrelated weights (a misplaced tensor) would differ by ~sqrt(2) of it.
    const std::vector<int32_t> tokens = {1, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100};
    const auto a = eval_logits(plain, tokens, {12}, 2, KvType::f32);
    const auto b = eval_logits(quant, tokens, {12}, 2, KvType::f32);
    ASSERT_EQ(a.size(), b.size());
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(std::isfinite(b[i]));
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += a[i] * a[i];
    }
    EXPECT_LT(std::sqrt(num / den), 0.5) << "relative RMS difference of the logits";
    fs::remove_all(dir);
}

TEST(HfDirQ4K, RowsThatAreNotWhole256BlocksTakeQ8_0) {
    const fs::path dir = write_directory("288", 288);  // ffn_down's rows are 288 wide: 9 blocks of 32
    auto quant = Model::load(dir.string(), ModelLoadOptions{LoadQuantization::q4_K});
    const gguf::File& qf = *ModelAccess::impl(*quant).file;
    EXPECT_EQ(qf.find_tensor("blk.0.ffn_down.weight")->type, TensorType::Q8_0);
    EXPECT_EQ(qf.find_tensor("blk.0.ffn_up.weight")->type, TensorType::Q4_K);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::test
