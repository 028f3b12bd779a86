// Speculative decoding on the CUDA backend changes no bit (issue 30 item 3, "the GPU backend when it
// lands"): on the GPU, generate() with a drafter gives the token ids, text, the logits each token was
// sampled from, the final sampler state and the saved state file's bytes of generate() without one. The
// reference is plain decoding on the same GPU (the definition of the promise; the CPU's own speculative
// tests, tests/unit/speculative_generate_test.cpp, hold the same on every CPU path).
//
// Drafters: prompt lookup on a repetitive prompt, a drafter whose guesses are nearly all wrong (every
// verification batch rejected at its first row: the GPU KV blocks are rewound each round), and the model
// as its own draft (long accepted batches: verification batches of many rows through the GPU kernels).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "backends/cuda/cuda_backend.h"
#include "engine/device.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/sampler.h"
#include "kvstash/speculative.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "kvstash/tokenizer.h"

namespace kvstash {
namespace {

std::string fixture(const std::string& relative) {
    const char* env = std::getenv("KVSTASH_FIXTURES");
    return std::string(env != nullptr && *env != 0 ? env : KVSTASH_SOURCE_DIR "/tests/fixtures") + "/" + relative;
}

// Pseudo-random guesses: nearly every one rejected, so each round rewinds the GPU state.
class WrongDrafter final : public Drafter {
public:
    explicit WrongDrafter(int64_t n_vocab) : n_vocab_(n_vocab) {}
    void propose(std::span<const int32_t>, int32_t max_tokens, std::vector<int32_t>& draft) override {
        for (int32_t i = 0; i < max_tokens; ++i) {
            state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
            draft.push_back(static_cast<int32_t>((state_ >> 33) % static_cast<uint64_t>(n_vocab_)));
        }
    }
    const char* name() const override { return "wrong"; }

private:
    int64_t n_vocab_;
    uint64_t state_ = 11;
};

struct Outcome {
    GenerateResult result;
    std::vector<std::vector<float>> logits;  // what each token was sampled from
    SamplerState sampler;
    std::string saved;  // the state file's bytes
};

Outcome run(const std::shared_ptr<const Model>& model, const std::string& prompt, const SamplerParams& params,
            std::shared_ptr<Drafter> drafter) {
    Evaluator evaluator(model);
    State state(*model, StateOptions{.n_ctx = 512});
    evaluator.eval(state, model->tokenizer().encode(prompt, AddSpecial::no, ParseSpecial::no));
    Sampler sampler(params);
    GenerateOptions options;
    options.max_tokens = 48;
    options.speculation.max_draft = 8;
    options.drafter = std::move(drafter);
    Outcome out;
    options.on_sample = [&out](std::span<const float> l, int32_t) { out.logits.emplace_back(l.begin(), l.end()); };
    out.result = generate(evaluator, state, sampler, options, [](int32_t, std::string_view) { return true; });
    out.sampler = sampler.state();
    const std::string path =
        (std::filesystem::temp_directory_path() / ("kvstash_gpu_spec_" + std::to_string(::getpid()) + ".kvs")).string();
    save_state(state, path);
    std::ifstream in(path, std::ios::binary);
    out.saved = std::string(std::istreambuf_iterator<char>(in), {});
    std::filesystem::remove(path);
    return out;
}

void expect_identical(const Outcome& plain, const Outcome& spec, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(plain.result.tokens, spec.result.tokens);
    EXPECT_EQ(plain.result.text, spec.result.text);
    ASSERT_EQ(plain.logits.size(), spec.logits.size());
    for (size_t i = 0; i < plain.logits.size(); ++i) {
        ASSERT_EQ(plain.logits[i].size(), spec.logits[i].size());
        ASSERT_EQ(0, std::memcmp(plain.logits[i].data(), spec.logits[i].data(), plain.logits[i].size() * sizeof(float)))
            << "logits of token " << i << " differ";
    }
    EXPECT_EQ(plain.sampler.rng, spec.sampler.rng);
    EXPECT_TRUE(plain.saved == spec.saved) << "the saved state files differ";
}

class CudaSpeculativeE2E : public testing::TestWithParam<const char*> {
protected:
    static void SetUpTestSuite() {
        if (cuda_device_count() > 0) use_device(DeviceKind::cuda);
    }
};

TEST_P(CudaSpeculativeE2E, EveryDrafterGivesPlainDecodingsBitsOnTheGpu) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU e2e test skipped";
    const auto model = Model::load(fixture(GetParam()));
    const std::string prompt =
        "one two three four five six seven eight one two three four five six seven eight one two";
    for (const float temperature : {0.0f, 0.8f}) {
        SamplerParams params;
        params.temperature = temperature;
        params.top_k = 40;
        params.top_p = 0.95f;
        params.seed = 5;
        const std::string setting = temperature == 0.0f ? "greedy" : "seeded sampling";
        const Outcome plain = run(model, prompt, params, nullptr);
        ASSERT_EQ(plain.result.tokens.size(), 48u);
        const Outcome lookup = run(model, prompt, params, make_lookup_drafter());
        expect_identical(plain, lookup, setting + ", lookup");
        const Outcome wrong = run(model, prompt, params, std::make_shared<WrongDrafter>(model->info().n_vocab));
        expect_identical(plain, wrong, setting + ", wrong guesses");
        EXPECT_GT(wrong.result.drafted, 0);
        EXPECT_LT(wrong.result.accepted, wrong.result.drafted);
        const Outcome self = run(model, prompt, params, make_model_drafter(model, *model, {.n_threads = 1}));
        expect_identical(plain, self, setting + ", the model as its own draft");
        if (temperature == 0.0f) {  // the draft model guesses greedily: under sampling most guesses fail
            EXPECT_GT(self.result.accepted, 8) << "the same model's greedy guesses hold: long verification batches";
        }
        std::printf("[ %s, %s ] lookup %d/%d, wrong %d/%d, self %d/%d accepted/drafted\n", GetParam(), setting.c_str(),
                    static_cast<int>(lookup.result.accepted), static_cast<int>(lookup.result.drafted),
                    static_cast<int>(wrong.result.accepted), static_cast<int>(wrong.result.drafted),
                    static_cast<int>(self.result.accepted), static_cast<int>(self.result.drafted));
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaSpeculativeE2E,
                         testing::Values("qwen2/qwen2_q8_0.gguf", "tiny/q_q4_k.gguf", "tiny/gqa_bf16.gguf"));

}  // namespace
}  // namespace kvstash
