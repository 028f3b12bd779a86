// One set of bits on every CPU (issue 32): the default model's final logits on the scalar path and on the path this
// process runs, hashed, equal a pin recorded on x86-64's scalar path — wherever this runs. scripts/arm64_check.sh
// runs it on aarch64 (under qemu-user), where the scalar path must give x86's bits (the same C++, no x86 file is
// compiled there, and no fused multiply-add: -ffp-contract=off, CMakeLists.txt) and so must the NEON path.
//
// Origin of the pin: build/tests/parity_cross_cpu_logits on x86-64 (AVX-512 VNNI), whose child ran with
// KVSTASH_ISA=scalar; a failure prints the value. The tiny models' scalar pins (Numerics.PinnedLogitsOfThisPath,
// tests/unit/numerics_test.cpp) check the same across the quant types. The path's correctness against llama.cpp is
// parity.SmolLM2's. Re-pin with those when the scalar arithmetic changes on purpose (kNumericsEpoch).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <vector>

#include "backends/cpu/runtime/dispatch.h"
#include "support/eval_helpers.h"
#include "support/every_path.h"
#include "support/paths.h"

namespace kvstash {
namespace {

// XXH3-64 of the logits' bytes (64 positions × 49,152 vocabulary, f32) of 64 pseudo-random tokens (seed 32),
// evaluated in chunks of 5 and 59 tokens on 2 threads, SmolLM2-135M-Instruct Q4_1, scalar path.
// Re-pinned at numerics epoch 3 (canonical matmul: the scalar path now takes integer activations), x86-64,
// KVSTASH_ISA=scalar, 2026-11-28.
constexpr uint64_t kSmolLM2ScalarLogits = 0x0e38445684cdae83;

uint64_t smol_lm2_logits_hash() {
    const auto model = Model::load(test::default_model_path());
    const auto tokens = test::pseudo_random_tokens(64, model->info().n_vocab, 32);
    const std::vector<float> logits = test::eval_logits(model, tokens, {5, 59}, 2);
    return XXH3_64bits(logits.data(), logits.size() * sizeof(float));
}

TEST(CrossCpuLogits, SmolLM2ScalarPathGivesThePinnedBits) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    if (active_isa() != Isa::scalar) {  // KVSTASH_ISA is read once per process: the scalar path in a child
        if (test::forced_isa()) GTEST_SKIP() << "KVSTASH_ISA forces another path";
        EXPECT_TRUE(test::passes_on_path("scalar", "CrossCpuLogits.SmolLM2ScalarPathGivesThePinnedBits"));
        return;
    }
    const uint64_t got = smol_lm2_logits_hash();
    EXPECT_EQ(got, kSmolLM2ScalarLogits) << std::hex << "SmolLM2's scalar logits: got 0x" << got
                                         << ": this CPU's scalar path differs from x86-64's (or the scalar arithmetic"
                                            " changed: see the file's comment)";
}

// The same pin on the path this process runs (the best one: AVX-512 or AVX2 on x86-64, NEON with the dot product on
// ARM64 under qemu -cpu max): every CPU path computes the scalar path's bits (docs/architecture/canonical-*.md).
TEST(CrossCpuLogits, SmolLM2ActivePathGivesThePinnedBits) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    if (active_isa() == Isa::scalar) GTEST_SKIP() << "the scalar path: the test above";
    const uint64_t got = smol_lm2_logits_hash();
    EXPECT_EQ(got, kSmolLM2ScalarLogits) << std::hex << "SmolLM2's logits on KVSTASH_ISA=" << isa_name(active_isa())
                                         << ": got 0x" << got
                                         << ": this path has left the canonical arithmetic (x86-64's scalar pin)";
}

}  // namespace
}  // namespace kvstash
