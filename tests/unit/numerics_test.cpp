// The numerics identity (backends/cpu/runtime/numerics.h) and its guard: logits of fixed token sequences, hashed,
// pinned per kernel path for the current kNumericsEpoch, on every path the dispatch can choose (scalar,
// avx2, avx512 = AVX-512 without VNNI, avx512_vnni).
//
// Origin of the pins. They are kvstash's own bits, per path: they detect a change, they are not a
// correctness reference. Each path's correctness comes from the parity tests, which compare it with
// transformers within a derived tolerance on every path this CPU runs
// (TinyModels.LogitsMatchTransformersOnEveryPath in tests/parity/tiny_models_test.cpp, over the same
// tiny models). Regenerate them with
//     for isa in scalar avx2 avx512-novnni avx512; do
//         KVSTASH_ISA=$isa build/unit_numerics --gtest_filter=Numerics.PinnedLogitsOfThisPath; done
// on a CPU with AVX-512 VNNI and VBMI (it runs all four; each failure prints the value to pin), and check
// build/parity_tiny_models --gtest_filter='TinyModels.*' passes on that build.
// When PinnedLogitsOfThisPath fails after a kernel change that is intended: raise kNumericsEpoch in
// src/backends/cpu/runtime/numerics.h (so that prefix caches and state files from older builds are not
// taken for bitwise-equal) and re-pin every path as above.
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/runtime/numerics.h"
#include "support/eval_helpers.h"
#include "support/every_path.h"
#include "support/paths.h"

namespace kvstash {
namespace {

struct Pin {
    const char* model;  // under tests/fixtures/tiny/
    // XXH3-64 of the logits' bytes of 300 tokens (split 7, 64, 229: crossing the 256-key attention
    // chunk) per path: scalar, avx2, avx512, avx512_vnni.
    uint64_t hash[4];
};

// Epoch 3 (attention's dot product and axpy became one arithmetic on every ISA: 16 fma lanes and the canonical
// tree; docs/architecture/canonical-float-ops.md), recorded on an AVX-512 VNNI CPU for all four paths
// (KVSTASH_ISA=scalar, avx2, avx512-novnni, avx512; a path's bits do not depend on the CPU that runs it). The
// columns still differ where the matmuls' arithmetic does (f32 activations: lanes per ISA; integer activations
// on avx2 and avx512_vnni, f32 on scalar and avx512): q8_0 and the K-quants, integer on both, now give the same
// bits on avx2 and avx512_vnni. On both AVX-512 paths f16, q4_0 and q4_1 take f32 activations (the same bits).
constexpr Pin kPins[] = {
    {"gqa_f16.gguf", {0xd5b12a6533816ae5, 0xec5ae410bd08f58a, 0xfdfb6cf5a67d7640, 0xfdfb6cf5a67d7640}},
    {"q_q8_0.gguf", {0xc9668ae10ee49c51, 0x4efd8d438d3ad55c, 0x0bde36343b072f74, 0x4efd8d438d3ad55c}},
    {"q_q4_k.gguf", {0x2e0c574fcb735aa6, 0xddb54e88f254162a, 0x5e558d8fa4542561, 0xddb54e88f254162a}},
    {"q_q6_k.gguf", {0x7be5ba2663a93815, 0x90656f3b5ce9b3e4, 0xdbf7ab93876e0989, 0x90656f3b5ce9b3e4}},
    {"q_q4_0.gguf", {0xc516fbff8e06ed17, 0x7acf0fa352829226, 0xc2ba2d3861ad45dc, 0xc2ba2d3861ad45dc}},
    {"q_q4_1.gguf", {0x6e6609cfd5dd1804, 0xda05223d54adf381, 0xa488feb308bb3146, 0xa488feb308bb3146}},
};

uint64_t logits_hash(const char* model_name) {
    auto model = Model::load(test::fixture_path(std::string("tiny/") + model_name));
    const auto tokens = test::pseudo_random_tokens(300, model->info().n_vocab, 2026);
    const std::vector<float> logits = test::eval_logits(model, tokens, {7, 64, 229}, 2);
    return XXH3_64bits(logits.data(), logits.size() * sizeof(float));
}

TEST(Numerics, PathsAndDescriptions) {
    EXPECT_EQ(numerics_path(Isa::scalar), NumericsPath::scalar);
    EXPECT_EQ(numerics_path(Isa::avx2), NumericsPath::avx2);
    const NumericsPath p512 = numerics_path(Isa::avx512);
    EXPECT_TRUE(p512 == NumericsPath::avx512 || p512 == NumericsPath::avx512_vnni);
    EXPECT_EQ(current_numerics(), numerics_of(active_isa()));
    EXPECT_EQ(current_numerics().epoch, kNumericsEpoch);
    EXPECT_EQ(describe(Numerics{1, NumericsPath::avx2}), "epoch 1, avx2");
    EXPECT_NE(describe(Numerics{}).find("unknown"), std::string::npos);
    EXPECT_NE(numerics_of(Isa::scalar), numerics_of(Isa::avx2));
}

TEST(Numerics, PinnedLogitsOfThisPath) {
    const Numerics n = current_numerics();
    const auto index = static_cast<size_t>(n.path) - 1;
    ASSERT_LT(index, 4u) << "no pins for " << describe(n) << ": add a column to kPins";
    for (const Pin& pin : kPins) {
        const uint64_t got = logits_hash(pin.model);
        EXPECT_EQ(got, pin.hash[index]) << std::hex << "logits of " << pin.model << " on " << describe(n)
                                        << " changed: got 0x" << got
                                        << ". If intended, raise kNumericsEpoch and re-pin (see the file's comment).";
    }
}

// The test above on every path this CPU runs, in child processes (KVSTASH_ISA is read once per process).
TEST(Numerics, PinnedLogitsOnEveryPath) {
    if (test::forced_isa()) GTEST_SKIP() << "KVSTASH_ISA is set: PinnedLogitsOfThisPath checks that path";
    const std::vector<std::string> failed = test::failing_paths("Numerics.PinnedLogitsOfThisPath");
    for (const std::string& setting : failed) ADD_FAILURE() << "pins differ on KVSTASH_ISA=" << setting;
}

// One set of bits across CPUs where every op's arithmetic is the same: a model whose matmuls take integer
// activations on both avx2 and avx512_vnni (q8_0, the K-quants) gives the same logits on both, now that attention,
// exp, the norms, RoPE and the activations are canonical (docs/architecture/canonical-float-ops.md). A change that
// gives one of those paths its own arithmetic again makes their pins differ and fails here.
TEST(Numerics, IntegerActivationModelsHaveOnePinOnAvx2AndAvx512Vnni) {
    for (const Pin& pin : kPins) {
        const std::string model = pin.model;
        if (model != "q_q8_0.gguf" && model != "q_q4_k.gguf" && model != "q_q6_k.gguf") continue;
        EXPECT_EQ(pin.hash[1], pin.hash[3]) << model << ": avx2 and avx512_vnni pins differ";
    }
}

// The weight layout (q5_0 kept or repacked to q8_0 at load) follows the numerics path, and agrees with what
// matmul reads on the ISA that runs it.
TEST(Numerics, Q5_0LayoutFollowsThePath) {
    EXPECT_TRUE(matmul_reads_q5_0(NumericsPath::avx2));
    EXPECT_FALSE(matmul_reads_q5_0(NumericsPath::scalar));
    EXPECT_FALSE(matmul_reads_q5_0(NumericsPath::avx512));
    EXPECT_FALSE(matmul_reads_q5_0(NumericsPath::avx512_vnni));
    EXPECT_FALSE(matmul_reads_q5_0(NumericsPath::unknown));
}

// Every path the dispatch can choose has its own numerics path, so no two share pins by accident.
TEST(Numerics, EveryPathIsDistinct) {
    if (test::forced_isa()) GTEST_SKIP() << "KVSTASH_ISA is set";
    const std::vector<std::string> settings = isa_settings();
    EXPECT_EQ(settings.front(), "scalar");
    if (cpu_supports_avx512_vnni()) {
        EXPECT_EQ(settings.size(), 4u);
        EXPECT_EQ(current_numerics().path, NumericsPath::avx512_vnni);
    }
}

}  // namespace
}  // namespace kvstash
