// `-m DIR` for the recurrent families (issue 33 item 7). tests/fixtures/hf/mamba1_f32 (mamba2_f32,
// granitehybrid_f32) is the Hugging Face directory of tests/fixtures/recurrent/mamba1_f32.gguf (...), written back by
// tests/reference/make_hf_recurrent_dirs.py (A_log = log(-A) in float64, stored f32). Loaded as a directory,
// it gives the GGUF's logits within a few float32 units (A = -exp(A_log) is recomputed in f32, as the converter
// does) and transformers' reference logits of the fixture (tests/fixtures/recurrent/mamba1_f32.json) as closely
// as the GGUF does. Other hybrid families' directories are refused by name, with the way to run them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

std::vector<float> all_logits(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens) {
    Evaluator evaluator(model, 2);
    State state(*model, StateOptions{.n_ctx = 256});
    std::vector<float> logits;
    evaluator.eval(state, tokens, &logits);
    return logits;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    return worst;
}

TEST(HfDirRecurrent, RecurrentDirectoriesGiveTheGgufsLogits) {
    for (const std::string name : {"mamba1_f32", "mamba2_f32", "granitehybrid_f32"}) {
        SCOPED_TRACE(name);
        const auto j = load_json(fixture_path("recurrent/" + name + ".json"));
        const auto tokens = j.at("tokens").get<std::vector<int32_t>>();
        const auto dir = Model::load(fixture_path("hf/" + name));
        const auto gguf = Model::load(fixture_path("recurrent/" + name + ".gguf"));
        EXPECT_EQ(dir->info().architecture, gguf->info().architecture);
        EXPECT_EQ(dir->info().n_recurrent_layers, gguf->info().n_recurrent_layers);
        EXPECT_EQ(dir->n_vocab(), gguf->n_vocab());
        const std::vector<float> ours = all_logits(dir, tokens);
        const std::vector<float> converted = all_logits(gguf, tokens);
        ASSERT_EQ(ours.size(), converted.size());
        const double scale = j.at("max_abs_ref").get<double>();
        const double vs_gguf = max_abs_diff(ours, converted);
        std::vector<float> reference;
        for (const auto& row : j.at("logits")) {
            for (const auto& x : row) reference.push_back(x.get<float>());
        }
        ASSERT_EQ(reference.size(), ours.size());
        const double dir_vs_transformers = max_abs_diff(ours, reference);
        const double gguf_vs_transformers = max_abs_diff(converted, reference);
        std::printf(
            "%s directory: max |logit diff| vs its GGUF %.3g, vs transformers %.3g (the GGUF: %.3g), "
            "max |ref| %.3g\n",
            name.c_str(), vs_gguf, dir_vs_transformers, gguf_vs_transformers, scale);
        // A_log -> A rounds once in f32 per element (1 ulp of A), which moves logits by a few float32 units of
        // their scale at most; the GGUF itself is within 1e-5 of transformers.
        EXPECT_LE(vs_gguf, 1e-5 * scale);
        EXPECT_LE(dir_vs_transformers, gguf_vs_transformers + 1e-5 * scale);
    }
}

TEST(HfDirRecurrent, OtherRecurrentFamiliesAreRefusedByName) {
    for (const char* arch : {"FalconH1ForCausalLM", "JambaForCausalLM"}) {
        const fs::path dir = fs::temp_directory_path() / ("kvstash_hf_" + std::string(arch) + std::to_string(getpid()));
        fs::create_directories(dir);
        std::ofstream(dir / "config.json") << R"({"architectures": [")" << arch << R"("], "num_hidden_layers": 2})";
        try {
            Model::load(dir.string());
            ADD_FAILURE() << arch << " loaded";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
            EXPECT_NE(std::string(e.what()).find(arch), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("GGUF"), std::string::npos) << e.what();
        }
        fs::remove_all(dir);
    }
}

}  // namespace
}  // namespace kvstash::test
