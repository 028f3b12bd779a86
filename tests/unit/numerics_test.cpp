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

// Epoch 2 (q4_0 / q4_1 joined in epoch 2: their AVX2 kernels changed then). The scalar and avx2 columns
// were recorded on an AVX2-only CPU and hold on an AVX-512 one (a path's bits do not depend on the CPU
// that runs it); the avx512 and avx512_vnni columns on an AVX-512 VNNI CPU (KVSTASH_ISA=avx512-novnni and
// avx512). On both AVX-512 paths f16, q4_0 and q4_1 take f32 activations (the same bits); q8_0 and the
// K-quants take integer activations on avx512_vnni only.
constexpr Pin kPins[] = {
    {"gqa_f16.gguf", {0xfdd71e6cd97e5657, 0xcfa0aa80ab563dc1, 0x9bbffbc2bd42245f, 0x9bbffbc2bd42245f}},
    {"q_q8_0.gguf", {0x77b9f6f65f48d2ca, 0xe08049cf3755e697, 0x0bde36343b072f74, 0x4efd8d438d3ad55c}},
    {"q_q4_k.gguf", {0x633d4ebf7e9d1ab0, 0xe8639903834158c7, 0x5e558d8fa4542561, 0xddb54e88f254162a}},
    {"q_q6_k.gguf", {0xfbb3f746741b25c7, 0x7682b8867ce83329, 0xdbf7ab93876e0989, 0x90656f3b5ce9b3e4}},
    {"q_q4_0.gguf", {0x7a6592d371c26a75, 0x79315a90f08608d8, 0xc2ba2d3861ad45dc, 0xc2ba2d3861ad45dc}},
    {"q_q4_1.gguf", {0xfcb6eb12613f683d, 0x4439232cf3939b1b, 0xa488feb308bb3146, 0xa488feb308bb3146}},
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

// The weight layout (q5_0 kept or repacked to q8_0 at load) follows the numerics path, and agrees with what
// matmul reads on the ISA that runs it.
TEST(Numerics, Q5_0LayoutFollowsThePath) {
    for (Isa isa : available_isas()) {
        EXPECT_EQ(matmul_reads_q5_0(numerics_of(isa).path), matmul_uses_integer_activations(isa, kTensorTypeQ5_0))
            << isa_name(isa);
    }
    EXPECT_TRUE(matmul_reads_q5_0(NumericsPath::avx2));
    EXPECT_FALSE(matmul_reads_q5_0(NumericsPath::scalar));
    EXPECT_FALSE(matmul_reads_q5_0(NumericsPath::avx512));
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
