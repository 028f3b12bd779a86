// Logits of tiny random-weight Qwen2 and GPT-2 models (f32 and q8_0) against two independent oracles:
// Hugging Face transformers (fp32, one pass over all tokens) and llama.cpp (llama-cpp-python) on the same
// GGUF; and greedy continuations against transformers'. Fixtures and the script that made them (llama.cpp's
// own converter from HF checkpoints, every bias and norm weight redrawn): tests/fixtures/{qwen2,gpt2}/,
// tests/reference/make_transformer_models.py. Each fixture records `sensitivity_max_abs_diff`: zeroing any
// one kind of bias (or setting a norm weight to 1, or dropping the position table) moves the logits by
// 0.4 to 17, far above the bounds below, so an engine that ignores one fails here.
//
// Tolerance against transformers. Both compute in fp32 from the same weights (q8_0: the script copies the
// dequantized weights back into the HF model), so the results differ by rounding only: dot products of
// length K (K = max(n_embd, n_ff) <= 256) at most K·u·Σ|w·x| each (u = 2^-24); attention over T = 48
// positions (softmax and weighted sum: T·8·u, as for the tiny Llama models); the norms (RMSNorm /
// LayerNorm: double sums, a few u), GELU (exp_f32 against torch's tanh: a few ulp). Relative to the
// largest logit: (K + T·8)·u, 2.9e-5 (qwen2) and 3.8e-5 (gpt2). With the f16 KV cache every K and V element
// is rounded to f16: 10 · 2^-11 of max|ref|, as for the Llama models. q8_0 on AVX-512 VNNI multiplies
// 16-bit integer activations (backends/cpu/matmul/quantize_act.h): P · 4 / 65278 more, P = quantized products per
// token.
//
// llama.cpp (run with an f32 KV cache; its GELU reads an f16 table and q8_0 multiplies 8-bit activations)
// is compared within its own recorded distance to transformers (max_abs_diff_transformers_llamacpp) plus
// our bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/runtime/dispatch.h"
#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "kvstash/tokenizer.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

constexpr double kUnit = 0x1p-24;

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

// The f32-KV bound on |ours - transformers| / max|ref| (see the header).
double relative_bound(const nlohmann::json& fixture) {
    const auto& c = fixture.at("config");
    const auto k = std::max(c.at("n_embd").get<double>(), c.at("n_ff").get<double>());
    const double t = fixture.at("n_tokens").get<double>();
    double activation_rounding = 0.0;
    if (fixture.at("model").get<std::string>().find("q8_0") != std::string::npos &&
        matmul_uses_integer_activations(active_isa(), TensorType::Q8_0)) {
        // q, k, v, o, gate, up, down per layer, and the output
        activation_rounding = (c.at("n_layer").get<double>() * 7 + 1) * 4.0 / 65278.0;
    }
    return (k + t * 8) * kUnit + activation_rounding;
}

// The model fixtures (<name>.json beside <name>.gguf; not tokenizer_corpus.json).
std::vector<std::string> fixtures() {
    std::vector<std::string> all;
    for (const std::string family : {"qwen2", "gpt2"}) {
        for (const auto& f : fixture_files(family, ".json")) {
            if (f.find("tokenizer_corpus") == std::string::npos) all.push_back(f);
        }
    }
    return all;
}

std::shared_ptr<const Model> load_model(const nlohmann::json& fixture) {
    const std::string family = fixture.at("config").at("architecture").get<std::string>();
    return Model::load(fixture_path(family + "/" + fixture.at("model").get<std::string>()));
}

TEST(TransformerModels, LogitsMatchTransformersAndLlamaCpp) {
    const auto paths = fixtures();
    ASSERT_GE(paths.size(), 3u) << "expected the fixtures of tests/reference/make_transformer_models.py";
    for (const auto& path : paths) {
        SCOPED_TRACE(path);
        const auto j = load_json(path);
        auto model = load_model(j);
        EXPECT_EQ(model->info().architecture, j.at("config").at("architecture").get<std::string>());
        const auto tokens = j.at("tokens").get<std::vector<int32_t>>();
        const auto& ref = j.at("logits");
        ASSERT_EQ(ref.size(), tokens.size());
        ASSERT_EQ(static_cast<int64_t>(ref[0].size()), model->n_vocab());
        const auto n = static_cast<int64_t>(tokens.size());
        const auto f32 = eval_logits(model, tokens, {n}, 2, KvType::f32);
        const auto f16 = eval_logits(model, tokens, {n}, 2, KvType::f16);
        const auto [f32_ratio, f32_abs] = worst(f32, ref, model->n_vocab());
        const auto [f16_ratio, f16_abs] = worst(f16, ref, model->n_vocab());
        const auto [cpp_ratio, cpp_abs] = worst(f32, j.at("llamacpp_logits"), model->n_vocab());
        const double bound = relative_bound(j);
        std::printf(
            "%-16s vs transformers: f32 KV %.3g (%.3g of max|ref|, bound %.3g), f16 KV %.3g (%.3g); vs llama.cpp "
            "%.3g (llama.cpp vs transformers %.3g)\n",
            j.at("model").get<std::string>().c_str(), f32_abs, f32_ratio, bound, f16_abs, f16_ratio, cpp_abs,
            j.at("max_abs_diff_transformers_llamacpp").get<double>());
        EXPECT_LE(f32_ratio, bound);
        EXPECT_LE(f16_ratio, 10.0 / 2048.0 + bound);
        const double max_ref = j.at("max_abs_ref").get<double>();
        EXPECT_LE(cpp_abs, j.at("max_abs_diff_transformers_llamacpp").get<double>() + bound * max_ref);
        (void)cpp_ratio;
    }
}

TEST(TransformerModels, GreedyContinuationsMatchTransformers) {
    for (const auto& path : fixtures()) {
        SCOPED_TRACE(path);
        const auto j = load_json(path);
        auto model = load_model(j);
        const auto& g = j.at("greedy");
        const auto prompt = g.at("prompt").get<std::vector<int32_t>>();
        const auto want = g.at("continuation").get<std::vector<int32_t>>();
        // A near-tie can flip under rounding differences far below our bound: check only where the
        // reference's top-2 margin exceeds twice the f32-KV bound on |ours - ref|.
        const double bound = relative_bound(j) * j.at("max_abs_ref").get<double>();
        const auto margins = g.at("top2_margin").get<std::vector<double>>();
        Evaluator evaluator(model, 2);
        State state(*model, StateOptions{KvType::f32});
        evaluator.eval(state, prompt);
        size_t checked = 0;
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
            ++checked;
        }
        EXPECT_GE(checked, want.size() / 2) << "too few steps compared";
    }
}

// GPT-2's positions are a table of n_ctx_train rows: a state cannot be made longer, and evaluating past
// the table is refused with a clear error (before anything is written).
TEST(TransformerModels, LearnedPositionsEndAtTheTable) {
    auto model = Model::load(fixture_path("gpt2/gpt2_f32.gguf"));
    const int64_t n_ctx_train = model->n_ctx_train();
    ASSERT_EQ(n_ctx_train, 64);
    EXPECT_THROW(State(*model, StateOptions{KvType::f32, n_ctx_train + 1}), Error);
    State state(*model, StateOptions{KvType::f32});
    EXPECT_EQ(state.n_ctx(), n_ctx_train);
    Evaluator evaluator(model, 2);
    const auto tokens = pseudo_random_tokens(n_ctx_train, model->n_vocab(), 7);
    evaluator.eval(state, tokens);  // exactly fills the table
    EXPECT_EQ(state.n_tokens(), n_ctx_train);
    const int32_t one_more = 5;
    try {
        evaluator.eval(state, std::span<const int32_t>(&one_more, 1));
        ADD_FAILURE() << "evaluating position " << n_ctx_train << " did not throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(n_ctx_train)), std::string::npos) << e.what();
    }
    EXPECT_EQ(state.n_tokens(), n_ctx_train);
}

// The tokenizer kvstash builds from the converter's GGUF (tokenizer.ggml.pre "qwen2" / "gpt-2") against
// transformers' tokenizer of the directory it was converted from, on the shared ~1,300-string corpus
// (tests/reference/tokenizer_corpus.py); and decode gives what transformers' decode gives (the text, or
// for Qwen2 its NFC normalization).
TEST(TransformerModels, TokenizerMatchesTransformers) {
    for (const std::string family : {"qwen2", "gpt2"}) {
        SCOPED_TRACE(family);
        const auto j = load_json(fixture_path(family + "/tokenizer_corpus.json"));
        auto model = Model::load(fixture_path(family + "/" + family + "_f32.gguf"));
        const Tokenizer& tok = model->tokenizer();
        int mismatches = 0, round_trip_failures = 0;
        for (const auto& entry : j.at("entries")) {
            const auto text = entry.at("text").get<std::string>();
            const auto want = entry.at("ids").get<std::vector<int32_t>>();
            const auto got = tok.encode(text, AddSpecial::no, ParseSpecial::yes);
            if (got != want && ++mismatches <= 5) ADD_FAILURE() << "encode differs for \"" << text << "\"";
            const std::string decoded = entry.value("decoded", text);
            if (got == want && tok.decode(got) != decoded && ++round_trip_failures <= 3) {
                ADD_FAILURE() << "decode(encode(\"" << text << "\")) = \"" << tok.decode(got) << "\"";
            }
        }
        EXPECT_EQ(mismatches, 0) << "of " << j.at("entries").size() << " strings";
        EXPECT_EQ(round_trip_failures, 0);
        EXPECT_GT(j.at("entries").size(), 1000u);
    }
}

// The chat template llama.cpp's converter writes into a qwen2 GGUF (Qwen 2.5's own, from
// tests/fixtures/chat/qwen2_5.json) is recognised as ChatML with Qwen's default system prompt, and renders
// every case of that fixture as transformers' apply_chat_template does. GPT-2 has none: --chat needs a
// named template (an error that says so).
TEST(TransformerModels, ChatTemplateFromTheConvertedGguf) {
    auto qwen2 = Model::load(fixture_path("qwen2/qwen2_f32.gguf"));
    const ChatTemplate tmpl = ChatTemplate::for_model(*qwen2);
    EXPECT_EQ(tmpl.name(), "chatml");
    const auto fixture = load_json(fixture_path("chat/qwen2_5.json"));
    int matched = 0;
    for (const auto& c : fixture.at("cases")) {
        std::vector<ChatMessage> messages;
        for (const auto& m : c.at("messages")) {
            messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
        }
        const auto prompt =
            c.at("add_generation_prompt").get<bool>() ? AddGenerationPrompt::yes : AddGenerationPrompt::no;
        const std::string rendered = tmpl.render(messages, prompt);
        EXPECT_EQ(rendered, c.at("rendered").get<std::string>());
        matched += rendered == c.at("rendered").get<std::string>();
    }
    EXPECT_GE(matched, 20);
    auto gpt2 = Model::load(fixture_path("gpt2/gpt2_f32.gguf"));
    EXPECT_THROW(ChatTemplate::for_model(*gpt2), Error);
}

}  // namespace
}  // namespace kvstash::test
