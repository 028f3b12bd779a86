// Logits of a tiny random-weight Gemma 3 (6 layers, sliding window 8 on layers 0, 1, 3, 4, global layers 2 and 5,
// local rope base 2e4 from rope.freq_base_swa) against Hugging Face transformers fp32 over 40 tokens, so that the
// window slides and both layer kinds count; f32 matrices and the same weights quantized to Q5_0 (repacked to Q8_0
// at load; transformers gets the dequantized weights). Fixtures: tests/fixtures/gemma3_tiny/, made by
// tests/reference/make_gemma3_tiny.py; each records `window_effect_max_abs`, how far the logits move when every
// layer attends to all positions (8 to 9, far above the bounds below), so an engine that ignores the window fails.
//
// Tolerance relative to max|ref| per position, as for the qwen2/gpt2 fixtures (transformer_models_test.cpp):
// (K + 8·T)·u for fp32 rounding order (K = n_ff = 128, T = 40), times 4 for Gemma's extra norms (q/k and
// post-norms rescale every block's output); with integer activations for Q8_0 (AVX-512 VNNI), 4 / 65278 per
// quantized product per token on top.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backends/cpu/runtime/dispatch.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

constexpr double kUnit = 0x1p-24;

TEST(Gemma3Tiny, LogitsMatchTransformers) {
    const auto files = fixture_files("gemma3_tiny", ".json");
    ASSERT_EQ(files.size(), 2u) << "expected the fixtures of tests/reference/make_gemma3_tiny.py";
    for (const std::string& file : files) {
        SCOPED_TRACE(file);
        const auto j = load_json(file);
        auto model = Model::load(fixture_path("gemma3_tiny/" + j.at("model").get<std::string>()));
        const auto tokens = j.at("tokens").get<std::vector<int32_t>>();
        const auto& ref = j.at("logits");
        const auto V = static_cast<size_t>(model->n_vocab());
        const bool quantized = file.find("q5_0") != std::string::npos;
        double bound = 4.0 * (128 + 8.0 * static_cast<double>(tokens.size())) * kUnit;
        if (quantized && matmul_uses_integer_activations(active_isa(), TensorType::Q8_0))
            bound += (6 * 7 + 1) * 4.0 / 65278.0;
        const double window_effect = j.at("window_effect_max_abs").get<double>();
        for (KvType kv : {KvType::f32, KvType::f16}) {
            const auto ours = eval_logits(model, tokens, {static_cast<int64_t>(tokens.size())}, 2, kv);
            const RowErrors e = row_errors(ref, ours, V);
            const double worst = e.worst_relative, worst_abs = e.worst_abs, max_ref = e.max_ref;
            std::printf("%s, %s KV: max |ours - transformers| %.3g (%.3g of max|logit| %.3g; window effect %.3g)\n",
                        j.at("model").get<std::string>().c_str(), kv == KvType::f32 ? "f32" : "f16", worst_abs, worst,
                        max_ref, window_effect);
            // f16 KV: every K and V element rounded to f16, 10 · 2^-11 of max|ref| as for the Llama fixtures.
            EXPECT_LE(worst, kv == KvType::f32 ? bound : bound + 10.0 / 2048.0);
            EXPECT_GT(window_effect, 100.0 * worst_abs);
        }
    }
}

}  // namespace
}  // namespace kvstash::test
