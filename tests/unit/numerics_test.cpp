// The numerics identity (backends/cpu/runtime/numerics.h) and its guard: logits of fixed token sequences, hashed,
// pinned per kernel path for the current kNumericsEpoch. These pins are not correctness references (the
// parity tests compare against transformers and llama.cpp); they detect a change of the bits a path
// computes. When PinnedLogitsOfThisPath fails after a kernel change that is intended: raise
// kNumericsEpoch in src/backends/cpu/runtime/numerics.h (so that prefix caches and state files from older builds are
// not taken for bitwise-equal) and replace the pins with the values the failure prints, for every path
// (run the test on an AVX-512 machine too, or leave its pins 0 = not pinned).
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/runtime/numerics.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash {
namespace {

struct Pin {
    const char* model;  // under tests/fixtures/tiny/
    // XXH3-64 of the logits' bytes of 300 tokens (split 7, 64, 229: crossing the 256-key attention
    // chunk) per path: scalar, avx2, avx512, avx512_vnni; 0 = not pinned.
    uint64_t hash[4];
};

// Epoch 2 (q4_0 / q4_1 joined in epoch 2: their AVX2 kernels changed then).
constexpr Pin kPins[] = {
    {"gqa_f16.gguf", {0xfdd71e6cd97e5657, 0xcfa0aa80ab563dc1, 0, 0}},
    {"q_q8_0.gguf", {0x77b9f6f65f48d2ca, 0xe08049cf3755e697, 0, 0}},
    {"q_q4_k.gguf", {0x633d4ebf7e9d1ab0, 0xe8639903834158c7, 0, 0}},
    {"q_q6_k.gguf", {0xfbb3f746741b25c7, 0x7682b8867ce83329, 0, 0}},
    {"q_q4_0.gguf", {0x7a6592d371c26a75, 0x79315a90f08608d8, 0, 0}},
    {"q_q4_1.gguf", {0xfcb6eb12613f683d, 0x4439232cf3939b1b, 0, 0}},
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
    ASSERT_LT(index, 4u);
    int pinned = 0;
    for (const Pin& pin : kPins) {
        const uint64_t got = logits_hash(pin.model);
        if (pin.hash[index] == 0) {
            std::printf("not pinned: %s on %s: 0x%016llx\n", pin.model, describe(n).c_str(),
                        static_cast<unsigned long long>(got));
            continue;
        }
        ++pinned;
        EXPECT_EQ(got, pin.hash[index]) << std::hex << "logits of " << pin.model << " on " << describe(n)
                                        << " changed: got 0x" << got
                                        << ". If intended, raise kNumericsEpoch and re-pin (see the file's comment).";
    }
    if (pinned == 0) GTEST_SKIP() << "no pins for " << describe(n);
}

// The test above on every path this CPU runs, in child processes (KVSTASH_ISA is read once per process).
TEST(Numerics, PinnedLogitsOnEveryPath) {
    if (std::getenv("KVSTASH_ISA")) GTEST_SKIP() << "already a child";
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    ASSERT_GT(len, 0);
    self[len] = '\0';
    for (Isa isa : available_isas()) {
        const std::string run = std::string("KVSTASH_ISA=") + isa_name(isa) + " '" + self +
                                "' --gtest_filter=Numerics.PinnedLogitsOfThisPath";
        EXPECT_EQ(std::system(run.c_str()), 0) << "KVSTASH_ISA=" << isa_name(isa);
    }
}

}  // namespace
}  // namespace kvstash
