// The numerics identity (backends/cpu/runtime/numerics.h) and its guard: logits of fixed token sequences, hashed,
// pinned once for the current kNumericsEpoch and checked on every path the dispatch can choose (scalar, avx2,
// avx512 without VNNI, avx512 with VNNI; on aarch64 scalar, neon, neon without dotprod): every CPU path computes the
// same bits, so one pin holds on all.
//
// Origin of the pins. They are kvstash's own bits, per path: they detect a change, they are not a
// correctness reference. Each path's correctness comes from the parity tests, which compare it with
// transformers within a derived tolerance on every path this CPU runs
// (TinyModels.LogitsMatchTransformersOnEveryPath in tests/parity/tiny_models_test.cpp, over the same
// tiny models). Regenerate them with
//     for isa in scalar avx2 avx512-novnni avx512; do
//         KVSTASH_ISA=$isa build/unit_numerics --gtest_filter=Numerics.PinnedLogitsOfThisPath; done
// on a CPU with AVX-512 VNNI and VBMI (it runs all four; each failure prints the value to pin: all four must
// print the same value, or a path has left the canonical arithmetic), and check
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

#include "backends/cpu/runtime/amx.h"
#include "backends/cpu/runtime/numerics.h"
#include "support/eval_helpers.h"
#include "support/every_path.h"
#include "support/paths.h"

namespace kvstash {
namespace {

struct Pin {
    const char* model;  // under tests/fixtures/tiny/
    // XXH3-64 of the logits' bytes of 300 tokens (split 7, 64, 229: crossing the 256-key attention chunk).
    uint64_t hash;
};

// Epoch 3, NumericsPath::cpu (matmul: one arithmetic per weight type, docs/architecture/canonical-matmul.md;
// attention's dot product and axpy in 16 fma lanes and the canonical tree, canonical-float-ops.md). Recorded on an
// AVX-512 VNNI CPU on 2026-11-28 with the loop above: all four paths (KVSTASH_ISA=scalar, avx2, avx512-novnni,
// avx512) gave these same values, and the aarch64 paths (scalar, neon, neon-nodotprod) give them under qemu
// (scripts/arm64_check.sh).
constexpr Pin kPins[] = {
    {"gqa_f16.gguf", 0xfdfb6cf5a67d7640}, {"q_q8_0.gguf", 0x4efd8d438d3ad55c}, {"q_q4_k.gguf", 0xddb54e88f254162a},
    {"q_q6_k.gguf", 0x90656f3b5ce9b3e4},  {"q_q4_0.gguf", 0x7acf0fa352829226}, {"q_q4_1.gguf", 0xda05223d54adf381},
};

uint64_t logits_hash(const char* model_name) {
    auto model = Model::load(test::fixture_path(std::string("tiny/") + model_name));
    const auto tokens = test::pseudo_random_tokens(300, model->info().n_vocab, 2026);
    const std::vector<float> logits = test::eval_logits(model, tokens, {7, 64, 229}, 2);
    return XXH3_64bits(logits.data(), logits.size() * sizeof(float));
}

TEST(Numerics, PathsAndDescriptions) {
    // Every ISA computes the same bits: one path, so states and cache blocks move between CPUs.
    for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon}) EXPECT_EQ(numerics_path(isa), NumericsPath::cpu);
    EXPECT_EQ(current_numerics(), numerics_of(active_isa()));
    EXPECT_EQ(current_numerics().epoch, kNumericsEpoch);
    EXPECT_EQ(describe(Numerics{1, NumericsPath::avx2}), "epoch 1, avx2");
    EXPECT_EQ(describe(Numerics{kNumericsEpoch, NumericsPath::cpu}),
              "epoch " + std::to_string(kNumericsEpoch) + ", cpu");
    EXPECT_NE(describe(Numerics{}).find("unknown"), std::string::npos);
    EXPECT_EQ(numerics_of(Isa::scalar), numerics_of(Isa::avx2));
    EXPECT_EQ(numerics_of(Isa::scalar), numerics_of(Isa::avx512));
}

TEST(Numerics, PinnedLogitsOfThisPath) {
    const Numerics n = current_numerics();
    ASSERT_EQ(n.path, NumericsPath::cpu) << "no pins for " << describe(n);
    for (const Pin& pin : kPins) {
        const uint64_t got = logits_hash(pin.model);
        EXPECT_EQ(got, pin.hash) << std::hex << "logits of " << pin.model
                                 << " on KVSTASH_ISA=" << isa_name(active_isa()) << " changed: got 0x" << got
                                 << ". If intended on every path, raise kNumericsEpoch and re-pin (see the file's "
                                    "comment); if on one path only, that path no longer follows the canonical "
                                    "arithmetic (docs/architecture/canonical-*.md).";
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
    EXPECT_TRUE(matmul_reads_q5_0(Isa::avx2));
    EXPECT_FALSE(matmul_reads_q5_0(Isa::scalar));
    EXPECT_FALSE(matmul_reads_q5_0(Isa::avx512));
}

// Every setting the dispatch can choose is run by PinnedLogitsOnEveryPath, and all share the one CPU path.
TEST(Numerics, EverySettingIsRunAndSharesTheCpuPath) {
    if (test::forced_isa()) GTEST_SKIP() << "KVSTASH_ISA is set";
    const std::vector<std::string> settings = isa_settings();
    EXPECT_EQ(settings.front(), "scalar");
    if (cpu_supports_avx512_vnni()) {
        EXPECT_EQ(settings.size(), cpu_supports_amx() ? 5u : 4u);  // scalar avx2 avx512 avx512-novnni (amx)
        EXPECT_EQ(current_numerics().path, NumericsPath::cpu);
    }
}

}  // namespace
}  // namespace kvstash
