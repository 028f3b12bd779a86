// Per-token logits of tiny random-weight Llama models (every tensor type, GQA and not, tied and
// untied output, odd sizes, Llama 3.1 rope scaling) against Hugging Face transformers.
// Fixtures and the script that made them: tests/fixtures/tiny/, tests/reference/make_tiny_models.py.
//
// Tolerance. The reference runs the same arithmetic in fp32 with the weights dequantized exactly
// (gguf-py; our dequantization is bitwise equal to it, tests/unit/tensor_type_test.cpp), so the two
// differ only by rounding: summation order and FMA in dot products of length K <= 512, and libm vs
// torch exp/cos/sin. One fp32 dot product's error is at most about K·u·Σ|w·x| (u = 2^-24), i.e.
// 3.05e-5 relative for K = 512, and in practice ~sqrt(K)·u. With an f32 KV cache we therefore require
// |ours - ref| <= K·u ≈ 3e-5 · max|ref| per position (measured: <= 3.4e-6); any real bug — a wrong
// Q/K permutation, rope frequency, norm or GQA mapping — moves logits by O(max|ref|).
// With the default f16 KV cache every K and V element is rounded to f16 (relative error <= 2^-11 ≈
// 4.9e-4), which reaches the logits through attention at that relative order, amplified by the softmax
// and the two layers; we allow 10 · 2^-11 ≈ 4.9e-3 · max|ref| (measured: <= 1.6e-3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

struct Diff {
    double max_abs = 0.0;
    double worst_ratio = 0.0;  // max over positions of max_abs_diff / max|ref|
};

Diff compare(const std::vector<float>& ours, const nlohmann::json& ref_logits, int64_t n_vocab) {
    Diff d;
    for (size_t t = 0; t < ref_logits.size(); ++t) {
        double scale = 0.0, diff = 0.0;
        for (int64_t v = 0; v < n_vocab; ++v) {
            const double r = ref_logits[t][static_cast<size_t>(v)].get<double>();
            scale = std::max(scale, std::fabs(r));
            diff = std::max(diff, std::fabs(r - ours[t * static_cast<size_t>(n_vocab) + static_cast<size_t>(v)]));
        }
        d.max_abs = std::max(d.max_abs, diff);
        d.worst_ratio = std::max(d.worst_ratio, diff / std::max(scale, 1e-6));
    }
    return d;
}

TEST(TinyModels, LogitsMatchTransformers) {
    const auto fixtures = fixture_files("tiny", ".json");
    ASSERT_GE(fixtures.size(), 9u) << "expected the tiny-model fixtures of tests/reference/make_tiny_models.py";
    for (const auto& path : fixtures) {
        SCOPED_TRACE(path);
        const auto j = load_json(path);
        auto model = Model::load(fixture_path("tiny/" + j.at("model").get<std::string>()));
        const auto tokens = j.at("tokens").get<std::vector<int32_t>>();
        const auto& ref = j.at("logits");
        ASSERT_EQ(ref.size(), tokens.size());
        ASSERT_EQ(static_cast<int64_t>(ref[0].size()), model->n_vocab());
        const auto n = static_cast<int64_t>(tokens.size());
        const Diff f32 = compare(eval_logits(model, tokens, {n}, 2, KvType::f32), ref, model->n_vocab());
        const Diff f16 = compare(eval_logits(model, tokens, {n}, 2, KvType::f16), ref, model->n_vocab());
        std::printf("%-40s f32 KV: max|diff| %.3g (%.3g of max|ref|)   f16 KV: max|diff| %.3g (%.3g)\n",
                    j.at("model").get<std::string>().c_str(), f32.max_abs, f32.worst_ratio, f16.max_abs, f16.worst_ratio);
        EXPECT_LE(f32.worst_ratio, 3.05e-5);
        EXPECT_LE(f16.worst_ratio, 10.0 / 2048.0);
    }
}

}  // namespace
}  // namespace kvstash::test
