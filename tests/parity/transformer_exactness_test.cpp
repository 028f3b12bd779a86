// The invariant for the qwen2 and gpt2 families (biases, LayerNorm, GELU, learned positions): the logits
// at position i are the same bits however the tokens arrived — one call, chunks, one at a time, several
// threads, batched with other sequences, after a fork, after truncate, after save and load. Every
// per-family piece (backends/cpu/norm/layer_norm.h, backends/cpu/activation/gelu.h, backends/cpu/norm/norm_rows.h,
// backends/cpu/ffn/feed_forward.h) works row by row in one fixed order, so none of these may change a bit. Models:
// tests/fixtures/{qwen2,gpt2}/*.gguf (tests/reference/make_transformer_models.py), f32 and q8_0 (gpt2_q8_0: a quantized
// fused attn_qkv bound as three row-block views).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "kvstash/state_file.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

std::vector<std::string> transformer_models() {
    std::vector<std::string> out;
    for (const std::string family : {"qwen2", "gpt2"}) {
        for (const std::string& json : fixture_files(family, ".json")) {
            if (json.find("tokenizer_corpus") != std::string::npos) continue;
            out.push_back(fixture_path(family + "/" + load_json(json).at("model").get<std::string>()));
        }
    }
    return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class TransformerExactness : public ::testing::Test {
protected:
    void SetUp() override {
        paths_ = transformer_models();
        ASSERT_GE(paths_.size(), 3u) << "expected the fixtures of tests/reference/make_transformer_models.py";
    }
    std::vector<std::string> paths_;
};

// 56 tokens: eval_logits makes a context of 56 + 8, gpt2's whole 64-position table.
TEST_F(TransformerExactness, ChunkingAndThreadsChangeNoBit) {
    for (const std::string& path : paths_) {
        SCOPED_TRACE(path);
        auto model = Model::load(path);
        const auto tokens = pseudo_random_tokens(56, model->n_vocab(), 5);
        for (KvType kv : {KvType::f32, KvType::f16}) {
            const auto want = eval_logits(model, tokens, {56}, 1, kv);
            for (const std::vector<int64_t>& chunks :
                 std::vector<std::vector<int64_t>>{{1}, {3, 5, 7}, {13, 32, 2}, {55, 1}}) {
                EXPECT_TRUE(same_bits(want, eval_logits(model, tokens, chunks, 2, kv)))
                    << "chunks starting " << chunks[0] << (kv == KvType::f32 ? ", f32 KV" : ", f16 KV");
            }
        }
    }
}

TEST_F(TransformerExactness, BatchedWithOtherSequencesEqualsAlone) {
    for (const std::string& path : paths_) {
        SCOPED_TRACE(path);
        auto model = Model::load(path);
        Evaluator evaluator(model, 2);
        const auto a = pseudo_random_tokens(50, model->n_vocab(), 1);
        const auto b = pseudo_random_tokens(23, model->n_vocab(), 2);
        const auto a_alone = eval_logits(model, a, {50}, 2, KvType::f32);
        const auto b_alone = eval_logits(model, b, {23}, 2, KvType::f32);
        State sa(*model, StateOptions{KvType::f32}), sb(*model, StateOptions{KvType::f32});
        std::vector<float> la, lb;
        const EvalRequest batch[] = {{&sa, a, &la}, {&sb, b, &lb}};
        evaluator.eval_batch(batch);
        EXPECT_TRUE(same_bits(a_alone, la));
        EXPECT_TRUE(same_bits(b_alone, lb));
    }
}

TEST_F(TransformerExactness, ForkAndTruncateContinueBitwise) {
    for (const std::string& path : paths_) {
        SCOPED_TRACE(path);
        auto model = Model::load(path);
        const int64_t V = model->n_vocab();
        Evaluator evaluator(model, 2);
        const auto all = pseudo_random_tokens(56, V, 3);
        const auto other = pseudo_random_tokens(8, V, 4);
        const auto want = eval_logits(model, all, {56}, 2, KvType::f32);
        State trunk(*model, StateOptions{KvType::f32});
        evaluator.eval(trunk, std::span(all).first(30));
        State branch = trunk.fork();
        evaluator.eval(trunk, other);
        std::vector<float> got;
        evaluator.eval(branch, std::span(all).subspan(30), &got);
        EXPECT_TRUE(same_bits(std::vector<float>(want.begin() + 30 * V, want.end()), got));
        trunk.truncate(21);  // drop the detour and a part of the shared prefix
        evaluator.eval(trunk, std::span(all).subspan(21), &got);
        EXPECT_TRUE(same_bits(std::vector<float>(want.begin() + 21 * V, want.end()), got));
    }
}

TEST_F(TransformerExactness, PrefillSaveLoadContinueIsOnePassBitwise) {
    for (const std::string& path : paths_) {
        SCOPED_TRACE(path);
        auto model = Model::load(path);
        const int64_t V = model->n_vocab();
        Evaluator evaluator(model, 2);
        const auto all = pseudo_random_tokens(40, V, 13);
        for (KvType kv : {KvType::f32, KvType::f16}) {
            const auto want = eval_logits(model, all, {40}, 2, kv);
            State state(*model, StateOptions{kv});
            evaluator.eval(state, std::span(all).first(25));
            const std::string file = ::testing::TempDir() + "transformer_saved.kvstate";
            save_state(state, file);
            State loaded = load_state(*model, file);
            std::filesystem::remove(file);
            EXPECT_EQ(loaded.n_tokens(), 25);
            std::vector<float> got;
            evaluator.eval(loaded, std::span(all).subspan(25), &got);
            EXPECT_TRUE(same_bits(std::vector<float>(want.begin() + 25 * V, want.end()), got))
                << (kv == KvType::f32 ? "f32 KV" : "f16 KV");
        }
    }
}

}  // namespace
}  // namespace kvstash::test
