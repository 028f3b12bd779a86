// The project's key invariant, tested bitwise: the logits at position i depend on tokens[0..i] only,
// whatever the split of the sequence into eval() calls and whatever the thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

// Splits exercised: token by token, prefix/suffix at many points (across the 32-token KV block and
// 128-token micro-batch boundaries), and repeating odd-sized chunks.
std::vector<std::vector<int64_t>> splits_for(int64_t n) {
    std::vector<std::vector<int64_t>> splits = {{1}, {3, 5, 7}, {2, 9}, {17}, {31, 1, 64}};
    for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{64}, int64_t{127},
                      int64_t{128}, int64_t{129}, n - 1}) {
        if (k > 0 && k < n) splits.push_back({k, n - k});
    }
    return splits;
}

void expect_bitwise_equal(const std::vector<float>& a, const std::vector<float>& b, int64_t n_vocab,
                          const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) return;
    for (size_t i = 0; i < a.size(); ++i) {
        uint32_t x, y;
        std::memcpy(&x, &a[i], 4);
        std::memcpy(&y, &b[i], 4);
        if (x != y) {
            FAIL() << what << ": first difference at position " << i / static_cast<size_t>(n_vocab) << ", vocab id "
                   << i % static_cast<size_t>(n_vocab) << ": " << a[i] << " vs " << b[i];
        }
    }
}

void check_invariance(const std::string& model_path, int64_t n_tokens, KvType kv_type) {
    auto model = Model::load(model_path);
    const auto tokens = pseudo_random_tokens(n_tokens, model->n_vocab(), 42);
    const auto whole = eval_logits(model, tokens, {n_tokens}, 1, kv_type);
    const auto whole_2threads = eval_logits(model, tokens, {n_tokens}, 2, kv_type);
    expect_bitwise_equal(whole, whole_2threads, model->n_vocab(), "1 vs 2 threads");
    for (const auto& split : splits_for(n_tokens)) {
        for (int threads : {1, 2}) {
            std::ostringstream name;  // (a stream: GCC 12 -Wrestrict misfires on string concatenation)
            name << "split";
            for (int64_t s : split) name << ' ' << s;
            name << ", " << threads << " threads";
            expect_bitwise_equal(whole, eval_logits(model, tokens, split, threads, kv_type), model->n_vocab(),
                                 name.str());
        }
    }
}

// Long contexts: attention over many 256-key chunks (backends/cpu/attention/attention.h), split over keys as well as
// heads when few rows are evaluated (decode), must still give the one-pass, one-thread bits.
void check_long_invariance(const std::string& model_path, int64_t n_tokens,
                           const std::vector<std::vector<int64_t>>& splits, KvType kv_type = KvType::f16) {
    auto model = Model::load(model_path);
    const auto tokens = pseudo_random_tokens(n_tokens, model->n_vocab(), 43);
    const auto whole = eval_logits(model, tokens, {n_tokens}, 1, kv_type);
    expect_bitwise_equal(whole, eval_logits(model, tokens, {n_tokens}, 2, kv_type), model->n_vocab(), "1 vs 2 threads");
    for (const auto& split : splits) {
        for (int threads : {1, 2}) {
            std::ostringstream name;
            name << "split";
            for (int64_t s : split) name << ' ' << s;
            name << ", " << threads << " threads";
            expect_bitwise_equal(whole, eval_logits(model, tokens, split, threads, kv_type), model->n_vocab(),
                                 name.str());
        }
    }
}

TEST(BatchInvariance, LongContextTinyModel) {
    const auto models = fixture_files("tiny", ".gguf");
    ASSERT_FALSE(models.empty());
    // (eval_logits cycles through the sizes: {255, 2, 1} evaluates single rows and pairs all along; {2990, 8, 2}
    // is a short suffix after a long prefix, as after a restore: one tile of rows split over key chunks.)
    check_long_invariance(models.front(), 3000, {{2999, 1}, {255, 2, 1}, {1300, 257}, {2047, 1}, {2990, 8, 2}});
}

TEST(BatchInvariance, LongContextSmolLM2) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    check_long_invariance(default_model_path(), 1100, {{1090, 1}, {513, 300}, {1092, 8}});
}

TEST(BatchInvariance, TinyModelsEveryTensorType) {
    const auto models = fixture_files("tiny", ".gguf");
    ASSERT_FALSE(models.empty()) << "no tiny models in tests/fixtures/tiny (see tests/reference/README.md)";
    for (const auto& path : models) {
        SCOPED_TRACE(path);
        check_invariance(path, 150, KvType::f16);
    }
}

TEST(BatchInvariance, TinyModelF32Cache) {
    const auto models = fixture_files("tiny", ".gguf");
    ASSERT_FALSE(models.empty());
    check_invariance(models.front(), 70, KvType::f32);
}

// q8_0 caches: a row is quantized once, from itself alone, when its token is evaluated, so the bits do not
// depend on the split either. The tiny models with head sizes that allow q8_0 (a multiple of 32; token by
// token among the splits), a long context (many 256-key chunks, decode split over keys), and SmolLM2.
// (The tiny Gemma 3's head size is 16: q8_0's sliding-window attention is covered by the kernel tests.)
TEST(BatchInvariance, TinyModelsQ8_0Cache) {
    int checked = 0;
    for (const auto& path : fixture_files("tiny", ".gguf")) {
        if (Model::load(path)->info().head_dim % 32 != 0) continue;
        SCOPED_TRACE(path);
        check_invariance(path, 150, KvType::q8_0);
        ++checked;
    }
    EXPECT_GE(checked, 2);
}

TEST(BatchInvariance, LongContextTinyModelQ8_0Cache) {
    check_long_invariance(fixture_path("tiny/q_q8_0.gguf"), 1500, {{1499, 1}, {255, 2, 1}, {700, 257}, {1479, 13, 8}},
                          KvType::q8_0);
}

TEST(BatchInvariance, SmolLM2Q8_0Cache) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    check_long_invariance(default_model_path(), 400, {{399, 1}, {200, 133}}, KvType::q8_0);
}

TEST(BatchInvariance, SmolLM2) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    check_invariance(default_model_path(), 140, KvType::f16);
}

}  // namespace
}  // namespace kvstash::test
