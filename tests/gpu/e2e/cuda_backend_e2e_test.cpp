// The CUDA backend end to end (label gpu; binary gpu_e2e_tests): whole models through the forward pass on
// the GPU, against the CPU backend on the same GGUF, and the GPU against itself (batch invariance, states
// saved and restored). Without a usable GPU every test skips, loudly (main below). NOT YET RUN ON A GPU.
//
// The process chooses the GPU once (engine/device.h: new States' KV blocks in device memory, the numerics
// path named after the GPU). The CPU references are computed with the CPU backend directly on host KV caches
// (model_forward), which that choice does not touch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/runtime/numerics.h"
#include "backends/cuda/cuda_backend.h"
#include "engine/device.h"
#include "kv/kv_cache.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "model/forward.h"
#include "model/model_access.h"

namespace kvstash {
namespace {

#define KVSTASH_REQUIRE_GPU_E2E()                                                             \
    do {                                                                                      \
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU e2e test skipped"; \
    } while (0)

// tests/fixtures/<relative>: $KVSTASH_FIXTURES (the GPU machine's checkout) or this source tree's.
std::string fixture(const std::string& relative) {
    const char* env = std::getenv("KVSTASH_FIXTURES");
    return std::string(env != nullptr && *env != 0 ? env : KVSTASH_SOURCE_DIR "/tests/fixtures") + "/" + relative;
}

// The fixtures the CUDA kernels take (every 2-D tensor BF16, F16 or quantized; the F32 ones are refused by
// name, see CudaRefuses below), Llama (GQA, odd sizes) and Qwen2 (biases, NEOX RoPE).
const char* const kFixtures[] = {"tiny/gqa_bf16.gguf", "tiny/gqa_f16.gguf", "tiny/q_q8_0.gguf",
                                 "tiny/q_q4_0.gguf",   "tiny/q_q4_1.gguf",  "tiny/q_q4_k.gguf",
                                 "tiny/q_q6_k.gguf",   "tiny/q_q5_k.gguf",  "qwen2/qwen2_q8_0.gguf"};

std::vector<int32_t> test_tokens(int64_t n_vocab, int n, uint32_t seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    uint32_t x = seed;
    for (int32_t& v : t) {
        x = x * 1664525u + 1013904223u;
        v = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(n_vocab));
    }
    return t;
}

// Every position's logits on the CPU backend, host KV, one segment.
std::vector<float> cpu_logits(const Model& model, const std::vector<int32_t>& tokens, KvType kv_type) {
    const ModelImpl& m = ModelAccess::impl(model);
    auto backend = make_cpu_backend(1);
    backend->bind_model(m);
    KvCache kv(m.config.n_kv_layers, m.config.n_embd_kv(), kv_type, host_kv_allocator());
    kv.grow(static_cast<int64_t>(tokens.size()));
    std::vector<float> logits(tokens.size() * static_cast<size_t>(m.config.n_vocab));
    ForwardSegment seg;
    seg.kv = &kv;
    seg.tokens = tokens;
    seg.logits_from = 0;
    seg.logits = logits.data();
    ForwardBookkeeping book;
    model_forward(m, std::span<const ForwardSegment>(&seg, 1), *backend, book);
    return logits;
}

// Every position's logits through the public API on the process's device (the GPU here).
std::vector<float> device_logits(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens,
                                 KvType kv_type = KvType::f16) {
    Evaluator eval(model);
    StateOptions options;
    options.kv_type = kv_type;
    State state(*model, options);
    std::vector<float> logits;
    eval.eval(state, tokens, &logits);
    return logits;
}

int64_t argmax(const float* row, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (row[i] > row[best]) best = i;
    return best;
}

class CudaBackendE2E : public testing::Test {
protected:
    static void SetUpTestSuite() {
        if (cuda_device_count() > 0) use_device(DeviceKind::cuda);
    }
};

TEST_F(CudaBackendE2E, NumericsPathNamesTheGpu) {
    KVSTASH_REQUIRE_GPU_E2E();
    const Numerics n = current_numerics();
    EXPECT_TRUE(is_cuda_path(n.path));
    EXPECT_EQ(static_cast<int>(static_cast<uint32_t>(n.path) - kCudaNumericsPathBase), cuda_compute_capability());
    EXPECT_NE(describe(n).find("cuda sm_"), std::string::npos) << describe(n);
}

// Logits within tolerance of the CPU backend, greedy tokens equal at every position whose CPU top-2 gap is
// wider than twice the tolerance (a closer tie may flip under rounding: counted and printed, not checked).
// Both with f32 KV (no f16 rounding of K/V to amplify the difference). Tolerance, per position, relative to
// that position's max |logit|: tests/parity/tiny_models_test.cpp's budget for the CPU against an f32
// reference — 3.05e-5, plus 4 / 65278 per matrix product whose activations the CPU rounds to integers
// (K-quants on AVX-512 VNNI, Q4_0/Q4_1 on AVX2; the GPU keeps f32 activations) — with all 7 products of a
// layer counted, and doubled: 2 × (3.05e-5 + 7 × 4 / 65278) ≈ 9.2e-4.
TEST_F(CudaBackendE2E, LogitsCloseToTheCpuAndGreedyTokensEqual) {
    KVSTASH_REQUIRE_GPU_E2E();
    constexpr double kTolerance = 2.0 * (3.05e-5 + 7.0 * 4.0 / 65278.0);
    for (const char* name : kFixtures) {
        SCOPED_TRACE(name);
        const auto model = Model::load(fixture(name));
        const int64_t n_vocab = ModelAccess::impl(*model).config.n_vocab;
        const std::vector<int32_t> tokens = test_tokens(n_vocab, 40, 7);
        const std::vector<float> cpu = cpu_logits(*model, tokens, KvType::f32);
        const std::vector<float> gpu = device_logits(model, tokens, KvType::f32);
        ASSERT_EQ(cpu.size(), gpu.size());
        double worst_ratio = 0.0;
        int close_ties = 0;
        for (size_t t = 0; t < tokens.size(); ++t) {
            const float* c = cpu.data() + t * static_cast<size_t>(n_vocab);
            const float* g = gpu.data() + t * static_cast<size_t>(n_vocab);
            double scale = 1e-6;
            double diff = 0.0;
            for (int64_t i = 0; i < n_vocab; ++i) {
                ASSERT_TRUE(std::isfinite(g[i])) << "position " << t << ", logit " << i;
                scale = std::max(scale, std::fabs(static_cast<double>(c[i])));
                diff = std::max(diff, std::fabs(static_cast<double>(c[i]) - g[i]));
            }
            worst_ratio = std::max(worst_ratio, diff / scale);
            const int64_t best = argmax(c, n_vocab);
            double gap = INFINITY;
            for (int64_t i = 0; i < n_vocab; ++i)
                if (i != best) gap = std::min(gap, static_cast<double>(c[best]) - c[i]);
            if (gap <= 2.0 * kTolerance * scale) {
                ++close_ties;
                continue;
            }
            EXPECT_EQ(best, argmax(g, n_vocab)) << "position " << t;
        }
        std::printf("%s: worst max|dlogit| / max|logit| %.3g (bound %.3g); %d of %zu positions too close to call\n",
                    name, worst_ratio, kTolerance, close_ties, tokens.size());
        EXPECT_LE(worst_ratio, kTolerance);
        EXPECT_LT(close_ties, static_cast<int>(tokens.size()) / 4) << "too few positions checked";
    }
}

// 1..N sequences in one eval_batch: each sequence's logits bitwise what it gets alone, on the GPU.
TEST_F(CudaBackendE2E, BatchInvariantFromOneToNSequences) {
    KVSTASH_REQUIRE_GPU_E2E();
    for (const char* name : {"tiny/q_q4_k.gguf", "qwen2/qwen2_q8_0.gguf"}) {
        SCOPED_TRACE(name);
        const auto model = Model::load(fixture(name));
        const int64_t n_vocab = ModelAccess::impl(*model).config.n_vocab;
        constexpr int kSequences = 9;
        std::vector<std::vector<int32_t>> prompts;
        std::vector<std::vector<float>> alone;
        for (int s = 0; s < kSequences; ++s) {
            prompts.push_back(test_tokens(n_vocab, 5 + 23 * s, 100u + static_cast<uint32_t>(s)));
            alone.push_back(device_logits(model, prompts.back()));
        }
        Evaluator eval(model);
        for (int n = 1; n <= kSequences; ++n) {
            std::vector<State> states;
            for (int s = 0; s < n; ++s) states.emplace_back(*model);
            std::vector<std::vector<float>> logits(static_cast<size_t>(n));
            std::vector<EvalRequest> requests;
            for (int s = 0; s < n; ++s) {
                requests.push_back(EvalRequest{&states[static_cast<size_t>(s)], prompts[static_cast<size_t>(s)],
                                               &logits[static_cast<size_t>(s)]});
            }
            eval.eval_batch(requests);
            for (int s = 0; s < n; ++s) {
                EXPECT_TRUE(logits[static_cast<size_t>(s)] == alone[static_cast<size_t>(s)])
                    << "sequence " << s << " of a batch of " << n;
            }
        }
    }
}

// A GPU state saved, loaded (its blocks back into device memory through the staging path) and continued:
// bitwise the uninterrupted run; a fork continues alike; the file says it is exact here.
TEST_F(CudaBackendE2E, SaveLoadContinueBitwiseOnTheGpu) {
    KVSTASH_REQUIRE_GPU_E2E();
    const auto model = Model::load(fixture("tiny/q_q8_0.gguf"));
    const int64_t n_vocab = ModelAccess::impl(*model).config.n_vocab;
    const std::vector<int32_t> prefix = test_tokens(n_vocab, 70, 3);
    const std::vector<int32_t> rest = test_tokens(n_vocab, 17, 4);
    for (const KvType kv_type : {KvType::f16, KvType::f32}) {
        Evaluator eval(model);
        StateOptions options;
        options.kv_type = kv_type;
        State whole(*model, options);
        eval.eval(whole, prefix);
        State branch = whole.fork();
        std::vector<float> expected;
        eval.eval(whole, rest, &expected);

        const std::string path = (std::filesystem::temp_directory_path() / "kvstash_gpu_e2e.kvs").string();
        save_state(branch, path);
        const StateFileInfo info = inspect_state_file(path, Checksums::verify);
        EXPECT_TRUE(info.exact_here) << info.numerics;
        EXPECT_NE(info.numerics.find("cuda sm_"), std::string::npos) << info.numerics;
        State restored = load_state(*model, path);
        std::vector<float> continued;
        eval.eval(restored, rest, &continued);
        EXPECT_TRUE(continued == expected) << "restored state";
        std::vector<float> forked;
        eval.eval(branch, rest, &forked);
        EXPECT_TRUE(forked == expected) << "fork";
        std::filesystem::remove(path);
    }
}

// What the kernels do not cover is refused by name, never run wrongly.
TEST_F(CudaBackendE2E, RefusesWhatItDoesNotCoverByName) {
    KVSTASH_REQUIRE_GPU_E2E();
    const auto expect_refusal = [](const std::string& file, const std::string& word) {
        SCOPED_TRACE(file);
        try {
            const auto model = Model::load(fixture(file));
            Evaluator eval(model);
            State state(*model);
            eval.eval(state, std::vector<int32_t>{1, 2, 3});
            ADD_FAILURE() << "ran on the CUDA backend";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
            EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
        }
    };
    expect_refusal("tiny/gqa_f32.gguf", "of type f32");  // the type as ggml spells it
    expect_refusal("gpt2/gpt2_f32.gguf", "gpt2");
}

}  // namespace
}  // namespace kvstash

int main(int argc, char** argv) {
    testing::InitGoogleTest(&argc, argv);
    if (kvstash::cuda_device_count() == 0) {
        std::fprintf(stderr,
                     "\n*** gpu_e2e_tests: NO CUDA DEVICE: every test SKIPS. Nothing was checked on a GPU. ***\n\n");
    } else {
        std::fprintf(stderr, "gpu_e2e_tests: %s\n", kvstash::cuda_device_description().c_str());
    }
    return RUN_ALL_TESTS();
}
