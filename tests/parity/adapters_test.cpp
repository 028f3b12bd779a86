// Adapters (docs/adapters.md) on the tiny Llama of tests/fixtures/adapters/ (tests/reference/make_adapters.py):
//   - a PEFT LoRA converted by llama.cpp's convert_lora_to_gguf.py: logits against transformers + PEFT (fp32)
//     and llama.cpp (llama-cpp-python, lora_scale 1 and 0.5);
//   - a control vector (llama.cpp's --control-vector GGUF): against a transformers hook adding the vector
//     after each layer, and llama.cpp's llama_set_adapter_cvec, all layers and one layer (range);
//   - adapters per request in one eval_batch: each bitwise as evaluated alone, in any chunking;
//   - refusals: a LoRA for another shape names its tensor; a file given as the wrong kind.
//
// Tolerance: both sides compute in fp32 from the same weights, so they differ by rounding: dot products
// of length K = max(n_embd, n_ff) = 96 (plus the LoRA's, of length <= 96 and rank 4), attention over
// T = 24 positions. As in transformer_models_test.cpp: (2K + 8T)·u relative to the largest logit of
// the row, u = 2^-24, with the f32 KV cache; llama.cpp within its recorded distance to transformers
// plus that bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvstash/adapter.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

constexpr double kUnit = 0x1p-24;

struct Fixture {
    nlohmann::json json = load_json(fixture_path("adapters/adapters.json"));
    std::shared_ptr<const Model> model = Model::load(fixture_path("adapters/base.gguf"));
    std::vector<int32_t> tokens = json.at("tokens").get<std::vector<int32_t>>();
    std::string lora = fixture_path("adapters/lora.gguf");
    std::string cvec = fixture_path("adapters/cvec.gguf");
    float cvec_scale = json.at("cvec_scale").get<float>();

    std::shared_ptr<const AdapterSet> load(std::vector<AdapterFile> files, ControlVectorLayers layers = {}) const {
        return AdapterSet::load(*model, files, layers);
    }
    // Logits of every position, one eval() of all tokens from an empty State, f32 KV.
    std::vector<float> logits(const std::shared_ptr<const AdapterSet>& adapters) const {
        Evaluator evaluator(model, 2);
        State state(*model, StateOptions{.kv_type = KvType::f32, .n_ctx = 64, .adapters = adapters});
        std::vector<float> all;
        evaluator.eval(state, tokens, &all);
        return all;
    }
    double bound() const { return (2.0 * 96 + 8.0 * static_cast<double>(tokens.size())) * kUnit; }
};

// max over positions of max_v |ours - ref| / max_v |ref|.
double worst_relative(const std::vector<float>& ours, const nlohmann::json& ref, int64_t n_vocab) {
    double ratio = 0.0;
    for (size_t t = 0; t < ref.size(); ++t) {
        double scale = 0.0, diff = 0.0;
        for (int64_t v = 0; v < n_vocab; ++v) {
            const double r = ref[t][static_cast<size_t>(v)].get<double>();
            scale = std::max(scale, std::fabs(r));
            diff = std::max(diff, std::fabs(r - ours[t * static_cast<size_t>(n_vocab) + static_cast<size_t>(v)]));
        }
        ratio = std::max(ratio, diff / std::max(scale, 1e-6));
    }
    return ratio;
}

double max_abs(const nlohmann::json& ref) {
    double m = 0.0;
    for (const auto& row : ref)
        for (const auto& x : row) m = std::max(m, std::fabs(x.get<double>()));
    return m;
}

TEST(Adapters, LoraMatchesPeftAndLlamaCpp) {
    const Fixture f;
    const int64_t n_vocab = f.model->n_vocab();
    const std::vector<float> ours = f.logits(f.load({{AdapterKind::lora, f.lora, 1.0f}}));
    EXPECT_LE(worst_relative(ours, f.json.at("logits_lora_peft"), n_vocab), f.bound());
    const double llamacpp_distance =
        f.json.at("cross_check").at("lora_peft_vs_llamacpp").get<double>() / max_abs(f.json.at("logits_lora_peft"));
    EXPECT_LE(worst_relative(ours, f.json.at("logits_lora_llamacpp"), n_vocab), f.bound() + llamacpp_distance);
    // Without the adapter the logits are the base model's, far from the LoRA's.
    EXPECT_LE(worst_relative(f.logits(nullptr), f.json.at("logits_base"), n_vocab), f.bound());
    EXPECT_GT(worst_relative(ours, f.json.at("logits_base"), n_vocab), 100 * f.bound());
}

TEST(Adapters, LoraScaleMultipliesAlphaOverRank) {
    const Fixture f;
    const std::vector<float> ours = f.logits(f.load({{AdapterKind::lora, f.lora, 0.5f}}));
    const double llamacpp_distance =
        f.json.at("cross_check").at("lora_peft_vs_llamacpp").get<double>() / max_abs(f.json.at("logits_lora_llamacpp"));
    EXPECT_LE(worst_relative(ours, f.json.at("logits_lora_llamacpp_half"), f.model->n_vocab()),
              f.bound() + llamacpp_distance);
}

TEST(Adapters, ControlVectorMatchesHookAndLlamaCpp) {
    const Fixture f;
    const int64_t n_vocab = f.model->n_vocab();
    const std::vector<float> ours = f.logits(f.load({{AdapterKind::control_vector, f.cvec, f.cvec_scale}}));
    EXPECT_LE(worst_relative(ours, f.json.at("logits_cvec_hf"), n_vocab), f.bound());
    const double llamacpp_distance =
        f.json.at("cross_check").at("cvec_hf_vs_llamacpp").get<double>() / max_abs(f.json.at("logits_cvec_hf"));
    EXPECT_LE(worst_relative(ours, f.json.at("logits_cvec_llamacpp"), n_vocab), f.bound() + llamacpp_distance);

    // --control-vector-layer-range R R: only layer R's vector.
    const auto r = f.json.at("cvec_range").get<int64_t>();
    const std::vector<float> ranged =
        f.logits(f.load({{AdapterKind::control_vector, f.cvec, f.cvec_scale}}, ControlVectorLayers{r, r}));
    EXPECT_LE(worst_relative(ranged, f.json.at("logits_cvec_llamacpp_range"), n_vocab), f.bound() + llamacpp_distance);
    EXPECT_GT(worst_relative(ranged, f.json.at("logits_cvec_llamacpp"), n_vocab), 100 * f.bound());
}

TEST(Adapters, RequestsUnderDifferentAdaptersBatchBitwiseAsAlone) {
    const Fixture f;
    const std::vector<std::shared_ptr<const AdapterSet>> sets = {
        nullptr, f.load({{AdapterKind::lora, f.lora, 1.0f}}),
        f.load({{AdapterKind::control_vector, f.cvec, f.cvec_scale}}),
        f.load({{AdapterKind::lora, f.lora, 0.5f}, {AdapterKind::control_vector, f.cvec, 1.0f}})};
    Evaluator evaluator(f.model, 2);
    // Alone, whole.
    std::vector<std::vector<float>> alone(sets.size());
    for (size_t i = 0; i < sets.size(); ++i) {
        State s(*f.model, StateOptions{.kv_type = KvType::f16, .n_ctx = 64, .adapters = sets[i]});
        evaluator.eval(s, f.tokens, &alone[i]);
    }
    // Together, in two eval_batch calls split at different points per request.
    std::vector<State> states;
    for (const auto& set : sets)
        states.emplace_back(*f.model, StateOptions{.kv_type = KvType::f16, .n_ctx = 64, .adapters = set});
    std::vector<std::vector<float>> first(sets.size()), second(sets.size());
    const std::span<const int32_t> all(f.tokens);
    std::vector<EvalRequest> batch;
    for (size_t i = 0; i < sets.size(); ++i) batch.push_back({&states[i], all.first(3 + 5 * i), &first[i]});
    evaluator.eval_batch(batch);
    batch.clear();
    for (size_t i = 0; i < sets.size(); ++i) batch.push_back({&states[i], all.subspan(3 + 5 * i), &second[i]});
    evaluator.eval_batch(batch);
    for (size_t i = 0; i < sets.size(); ++i) {
        std::vector<float> joined = first[i];
        joined.insert(joined.end(), second[i].begin(), second[i].end());
        ASSERT_EQ(joined.size(), alone[i].size());
        EXPECT_EQ(std::memcmp(joined.data(), alone[i].data(), joined.size() * sizeof(float)), 0) << "set " << i;
    }
    // And the sets really differ from each other.
    EXPECT_NE(std::memcmp(alone[0].data(), alone[1].data(), alone[0].size() * sizeof(float)), 0);
    EXPECT_NE(std::memcmp(alone[0].data(), alone[2].data(), alone[0].size() * sizeof(float)), 0);
}

TEST(Adapters, RefusesAnAdapterForAnotherModelNamingTheTensor) {
    const Fixture f;
    try {
        f.load({{AdapterKind::lora, fixture_path("adapters/lora_wrong_shape.gguf"), 1.0f}});
        FAIL() << "a LoRA for d_model 32 was accepted on a d_model 64 model";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
    }
    // The wrong kind: a control vector given as a LoRA, a LoRA as a control vector.
    EXPECT_THROW(f.load({{AdapterKind::lora, f.cvec, 1.0f}}), Error);
    EXPECT_THROW(f.load({{AdapterKind::control_vector, f.lora, 1.0f}}), Error);
    // A model file is not an adapter either.
    EXPECT_THROW(f.load({{AdapterKind::lora, fixture_path("adapters/base.gguf"), 1.0f}}), Error);
}

TEST(Adapters, FingerprintNamesFilesAndScales) {
    const Fixture f;
    const auto a = f.load({{AdapterKind::lora, f.lora, 1.0f}});
    const auto a_again = f.load({{AdapterKind::lora, f.lora, 1.0f}});
    const auto half = f.load({{AdapterKind::lora, f.lora, 0.5f}});
    const auto empty = f.load({});
    EXPECT_EQ(a->fingerprint(), a_again->fingerprint());
    EXPECT_NE(a->fingerprint(), half->fingerprint());
    EXPECT_EQ(empty->fingerprint(), "");
    EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace kvstash::test
