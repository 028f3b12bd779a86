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
// K-quant weights on AVX-512 VNNI multiply integer activations (backends/cpu/matmul/quantize_act.h): every input
// row of such a product is rounded to 16-bit integers per block, |x - x̂| <= d/2 = max_b|x| / 65278, i.e.
// 2^-16 · κ relative to a typical |x| of the block, with κ = max_b|x| / mean_b|x| (about 2.6 for
// Gaussian-like values in blocks of 32 and 3.6 in blocks of 256; we take κ <= 4). That perturbs each
// product by at most the same relative amount of its Σ|w·x| (the bound tests/unit/matmul_test.cpp
// checks exactly), and each such error reaches the logits linearly, at the order of max|ref| as the
// fp32 term above does. A token goes through P such products (7 per layer and the output: P = 15 for
// the K-quant models, 0 for the others), so we add P · 4 / 65278 ≈ 9.2e-4 · max|ref| to both bounds
// (measured with f32 KV: <= 1.1e-4, against <= 5e-6 with f32 activations; 8-bit activations, as in
// llama.cpp, measure 1.5-2.6e-2 and fail it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "backends/cpu/runtime/dispatch.h"

#include "support/eval_helpers.h"
#include "support/every_path.h"
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
                    j.at("model").get<std::string>().c_str(), f32.max_abs, f32.worst_ratio, f16.max_abs,
                    f16.worst_ratio);
        // Products per token with integer activations on this ISA: the 2-D weights other than the
        // embedding whose type matmul multiplies that way (the K-quants on AVX-512 VNNI).
        static const std::map<std::string, TensorType> kQuantized = {
            {"Q4_0", TensorType::Q4_0}, {"Q4_1", TensorType::Q4_1}, {"Q8_0", TensorType::Q8_0},
            {"Q4_K", TensorType::Q4_K}, {"Q5_K", TensorType::Q5_K}, {"Q6_K", TensorType::Q6_K}};
        int quantized_products = 0;
        for (const auto& [name, type] : j.at("config").at("tensor_types").items()) {
            const auto it = kQuantized.find(type.get<std::string>());
            if (name != "token_embd.weight" && it != kQuantized.end() &&
                matmul_uses_integer_activations(active_isa(), it->second)) {
                ++quantized_products;
            }
        }
        const double activation_rounding = quantized_products * 4.0 / 65278.0;
        EXPECT_LE(f32.worst_ratio, 3.05e-5 + activation_rounding);
        EXPECT_LE(f16.worst_ratio, 10.0 / 2048.0 + activation_rounding);
    }
}

// The test above on every path the dispatch can choose on this CPU (scalar, avx2, avx512, AVX-512
// without VNNI), in child processes: each path's bits are pinned (tests/unit/numerics_test.cpp), and this
// is where each is shown to be within tolerance of the reference.
TEST(TinyModels, LogitsMatchTransformersOnEveryPath) {
    if (forced_isa()) GTEST_SKIP() << "KVSTASH_ISA is set: LogitsMatchTransformers checks that path";
    for (const std::string& setting : failing_paths("TinyModels.LogitsMatchTransformers")) {
        ADD_FAILURE() << "logits differ from transformers beyond the tolerance on KVSTASH_ISA=" << setting;
    }
}

}  // namespace
}  // namespace kvstash::test
