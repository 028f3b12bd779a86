// Llama 3.1 "llama3" rope scaling of a Hugging Face directory (model/hf_rope_scaling.h, model/hf_config.h):
// - the factors equal, bit for bit, what llama.cpp's converter computes (tests/fixtures/rope/llama3_factors.json,
//   tests/reference/make_rope_scaling_fixture.py: the Llama 3.1 / 3.2 shapes and a grid); where torch's float32 pow is
//   not correctly rounded for a config, within 2 ulp;
// - config.json's rope_type: llama3 gives the factors for LlamaForCausalLM, an unsupported type or llama3 on another
//   architecture is refused naming the type.
// End to end (directory vs converted GGUF vs transformers): tests/parity/hf_dir_test.cpp, fixture llama3_rope_f32.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "kvstash/error.h"
#include "model/hf_config.h"
#include "model/hf_rope_scaling.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

uint32_t bits(float f) {
    uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return u;
}

TEST(HfRopeScaling, FactorsEqualTheConverters) {
    const auto j = load_json(fixture_path("rope/llama3_factors.json"));
    int exact_configs = 0;
    for (const auto& c : j.at("configs")) {
        SCOPED_TRACE(c.at("name").get<std::string>());
        Llama3RopeScaling s;
        s.rope_theta = c.at("rope_theta").get<double>();
        s.dim = c.at("head_dim").get<int64_t>();
        s.factor = c.at("factor").get<double>();
        s.low_freq_factor = c.at("low_freq_factor").get<double>();
        s.high_freq_factor = c.at("high_freq_factor").get<double>();
        s.original_max_position_embeddings = c.at("original_max_position_embeddings").get<double>();
        const std::vector<float> ours = llama3_rope_freq_factors(s);
        const auto ref = c.at("factor_bits").get<std::vector<uint32_t>>();
        ASSERT_EQ(ours.size(), ref.size());
        const bool exact = c.at("pow_correctly_rounded").get<bool>();
        exact_configs += exact;
        for (size_t i = 0; i < ref.size(); ++i) {
            const int64_t d = static_cast<int64_t>(bits(ours[i])) - static_cast<int64_t>(ref[i]);
            if (exact) {
                EXPECT_EQ(bits(ours[i]), ref[i]) << "frequency " << i;
            } else {
                EXPECT_LE(std::abs(d), 2) << "frequency " << i;
            }
        }
    }
    EXPECT_GE(exact_configs, 20);
}

nlohmann::json llama_config(const nlohmann::json& rope) {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"num_hidden_layers", 2},
            {"hidden_size", 256},
            {"intermediate_size", 512},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 1},
            {"max_position_embeddings", 131072},
            {"vocab_size", 320},
            {"rope_scaling", rope},
            {"rope_theta", 500000.0}};
}

TEST(HfRopeScaling, ConfigWithLlama3ScalingGivesTheFactors) {
    // transformers 4's layout: rope_scaling with "type"/"rope_type" and a top-level rope_theta.
    const auto config = llama_config({{"rope_type", "llama3"},
                                      {"factor", 8.0},
                                      {"low_freq_factor", 1.0},
                                      {"high_freq_factor", 4.0},
                                      {"original_max_position_embeddings", 8192}});
    const HfModelSpec spec = read_hf_config(config, "config.json");
    Llama3RopeScaling s;
    s.rope_theta = 500000.0;
    s.dim = 64;
    EXPECT_EQ(spec.rope_freq_factors, llama3_rope_freq_factors(s));
    ASSERT_EQ(spec.rope_freq_factors.size(), 32u);
    EXPECT_EQ(spec.rope_freq_factors.front(), 1.0f);
    EXPECT_EQ(spec.rope_freq_factors.back(), 8.0f);
    for (const auto& [key, value] : spec.metadata) EXPECT_EQ(key.find("rope.scaling"), std::string::npos) << key;

    EXPECT_TRUE(read_hf_config(llama_config({{"rope_type", "default"}}), "config.json").rope_freq_factors.empty());
}

void expect_unsupported(const nlohmann::json& config, const std::string& type) {
    try {
        read_hf_config(config, "config.json");
        FAIL() << "expected an error for " << type;
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("'" + type + "'"), std::string::npos) << e.what();
    }
}

TEST(HfRopeScaling, OtherTypesAreRefusedNamingTheType) {
    expect_unsupported(llama_config({{"rope_type", "yarn"}, {"factor", 4.0}}), "yarn");
    expect_unsupported(llama_config({{"type", "dynamic"}, {"factor", 2.0}}), "dynamic");
    expect_unsupported(llama_config({{"rope_type", "longrope"}}), "longrope");
    auto qwen = llama_config({{"rope_type", "llama3"}, {"factor", 8.0}});
    qwen["architectures"] = {"Qwen2ForCausalLM"};
    expect_unsupported(qwen, "llama3");  // the converter adds rope_freqs for LlamaModel only
}

}  // namespace
}  // namespace kvstash::test
