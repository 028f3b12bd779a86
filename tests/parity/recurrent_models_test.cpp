// Logits of tiny random-weight recurrent and hybrid models (Mamba-1, Mamba-2, granitehybrid; f32 and
// q8_0) against two independent oracles: Hugging Face transformers (fp32, one pass over all tokens)
// and llama.cpp (llama-cpp-python) on the same GGUF; and greedy continuations against transformers'.
// Fixtures and the script that made them (llama.cpp's own converter from HF checkpoints):
// tests/fixtures/recurrent/, tests/reference/make_recurrent_models.py.
//
// Tolerance against transformers. Both compute in fp32 from the same weights (q8_0: the script copies
// the dequantized weights back into the HF model), so the results differ by rounding only: dot
// products of length K <= 128 (ssm_in/ssm_out/FFN/attention) at most K·u·Σ|w·x| each (u = 2^-24); the
// scan's sum over d_state = 16; exp/log1p/softplus (ours: exp_f32, torch's) a few ulp; and the
// recurrence, which carries each token's rounding into the state: the state decays (|dA| < 1), so
// the carried error is at most the per-token error times T = 48 tokens. Relative to the largest
// logit that is below (K + T · 8) · u = 512 · u ≈ 3.05e-5 — the same bound as the tiny Llama models'
// (tests/parity/tiny_models_test.cpp), which we keep: measured <= 1e-6 (see the printout). A wrong
// formula (a missing D skip, a group mapping, a scale, a norm) moves logits by O(max|ref|).
// With the f16 KV cache (granitehybrid's attention layer) every K and V element is rounded to f16,
// as for the Llama models: 10 · 2^-11 of max|ref|. q8_0 models on AVX-512 VNNI multiply 16-bit integer
// activations (backends/cpu/matmul/quantize_act.h): P · 4 / 65278 more, P = quantized products per token.
//
// llama.cpp (second oracle, run with an f32 KV cache) multiplies q8_0 weights by 8-bit quantized
// activations, so it is compared with our f32-KV logits within its own recorded distance to
// transformers (max_abs_diff_transformers_llamacpp: ~2e-6 for f32 models, 0.04-0.12 for q8_0) plus our
// bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/runtime/dispatch.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

// max over positions of max_v |ours - ref| / max_v |ref|, and the largest absolute difference.
std::pair<double, double> worst(const std::vector<float>& ours, const nlohmann::json& ref, int64_t n_vocab) {
    double ratio = 0.0, abs_max = 0.0;
    for (size_t t = 0; t < ref.size(); ++t) {
        double scale = 0.0, diff = 0.0;
        for (int64_t v = 0; v < n_vocab; ++v) {
            const double r = ref[t][static_cast<size_t>(v)].get<double>();
            scale = std::max(scale, std::fabs(r));
            diff = std::max(diff, std::fabs(r - ours[t * static_cast<size_t>(n_vocab) + static_cast<size_t>(v)]));
        }
        ratio = std::max(ratio, diff / std::max(scale, 1e-6));
        abs_max = std::max(abs_max, diff);
    }
    return {ratio, abs_max};
}

int quantized_products(const nlohmann::json& fixture) {
    if (fixture.at("model").get<std::string>().find("q8_0") == std::string::npos) return 0;
    if (!matmul_uses_integer_activations(active_isa(), TensorType::Q8_0)) return 0;
    // Per token: ssm_in, ssm_out per Mamba layer; q, k, v, o per attention layer; gate, up, down per
    // FFN; the output (a generous count: every layer gets the larger of its kinds).
    const auto& c = fixture.at("config");
    return static_cast<int>(c.at("n_layer").get<int64_t>()) * 7 + 1;
}

TEST(RecurrentModels, LogitsMatchTransformersAndLlamaCpp) {
    const auto fixtures = fixture_files("recurrent", ".json");
    ASSERT_GE(fixtures.size(), 5u) << "expected the fixtures of tests/reference/make_recurrent_models.py";
    for (const auto& path : fixtures) {
        SCOPED_TRACE(path);
        const auto j = load_json(path);
        auto model = Model::load(fixture_path("recurrent/" + j.at("model").get<std::string>()));
        const auto tokens = j.at("tokens").get<std::vector<int32_t>>();
        const auto& ref = j.at("logits");
        const auto& llamacpp = j.at("llamacpp_logits");
        ASSERT_EQ(ref.size(), tokens.size());
        ASSERT_EQ(static_cast<int64_t>(ref[0].size()), model->n_vocab());
        const auto n = static_cast<int64_t>(tokens.size());
        const auto f32 = eval_logits(model, tokens, {n}, 2, KvType::f32);
        const auto f16 = eval_logits(model, tokens, {n}, 2, KvType::f16);
        const auto [f32_ratio, f32_abs] = worst(f32, ref, model->n_vocab());
        const auto [f16_ratio, f16_abs] = worst(f16, ref, model->n_vocab());
        const auto [cpp_ratio, cpp_abs] = worst(f32, llamacpp, model->n_vocab());
        std::printf(
            "%-24s vs transformers: f32 KV %.3g (%.3g of max|ref|), f16 KV %.3g (%.3g); vs llama.cpp %.3g "
            "(llama.cpp vs transformers %.3g)\n",
            j.at("model").get<std::string>().c_str(), f32_abs, f32_ratio, f16_abs, f16_ratio, cpp_abs,
            j.at("max_abs_diff_transformers_llamacpp").get<double>());
        const double activation_rounding = quantized_products(j) * 4.0 / 65278.0;
        EXPECT_LE(f32_ratio, 3.05e-5 + activation_rounding);
        EXPECT_LE(f16_ratio, 10.0 / 2048.0 + activation_rounding);
        const double max_ref = j.at("max_abs_ref").get<double>();
        const double llamacpp_gap = j.at("max_abs_diff_transformers_llamacpp").get<double>();
        EXPECT_LE(cpp_abs, llamacpp_gap + (3.05e-5 + activation_rounding) * max_ref);
    }
}

TEST(RecurrentModels, GreedyContinuationsMatchTransformers) {
    for (const auto& path : fixture_files("recurrent", ".json")) {
        SCOPED_TRACE(path);
        const auto j = load_json(path);
        auto model = Model::load(fixture_path("recurrent/" + j.at("model").get<std::string>()));
        const auto& g = j.at("greedy");
        const auto prompt = g.at("prompt").get<std::vector<int32_t>>();
        const auto want = g.at("continuation").get<std::vector<int32_t>>();
        // A near-tie can flip under rounding differences far below our bound: check only where the
        // reference's top-2 margin exceeds twice the f32-KV bound on |ours - ref| (see above).
        const double bound = (3.05e-5 + quantized_products(j) * 4.0 / 65278.0) * j.at("max_abs_ref").get<double>();
        const auto margins = g.at("top2_margin").get<std::vector<double>>();
        Evaluator evaluator(model, 2);
        State state(*model, StateOptions{KvType::f32});
        evaluator.eval(state, prompt);
        for (size_t i = 0; i < want.size(); ++i) {
            const auto logits = state.last_logits();
            const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
            if (margins[i] <= 2 * bound) {
                std::printf("%s: step %zu has margin %.3g <= 2 x bound %.3g: stopping the comparison there\n",
                            j.at("model").get<std::string>().c_str(), i, margins[i], bound);
                break;
            }
            ASSERT_EQ(next, want[i]) << "greedy step " << i;
            evaluator.eval(state, std::span<const int32_t>(&want[i], 1));
        }
    }
}

}  // namespace
}  // namespace kvstash::test
