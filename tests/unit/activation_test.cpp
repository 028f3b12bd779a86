// swiglu (backends/cpu/activation/activation.h): every ISA this CPU runs bitwise equal to the scalar reference (odd
// lengths, tails, large |gate|, zeros, infinities), in place, and against silu·up in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {
namespace {

constexpr double kUnit = 0x1p-24;  // unit roundoff of fp32

std::vector<float> random_vector(size_t n, uint32_t seed, float sigma) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, sigma);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
}

// memcmp of the first `count` floats (empty vectors have no data pointer to pass to memcmp).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b, size_t count) {
    return count == 0 || std::memcmp(a.data(), b.data(), count * sizeof(float)) == 0;
}

TEST(Swiglu, EveryIsaEqualsReferenceBitwise) {
    const float inf = std::numeric_limits<float>::infinity();
    for (Isa isa : available_isas()) {
        for (int64_t n : {0, 1, 3, 8, 13, 16, 17, 40, 1536, 1541}) {
            std::vector<float> gate = random_vector(static_cast<size_t>(n), static_cast<uint32_t>(n), 4.0f);
            const std::vector<float> up = random_vector(static_cast<size_t>(n), static_cast<uint32_t>(n) + 9, 1.0f);
            const float edges[] = {0.0f, -0.0f, 95.0f, -95.0f, 200.0f, -200.0f, inf, -inf, 1e-30f, -30.0f};
            for (size_t i = 5; i < gate.size(); i += 11) gate[i] = edges[(i / 11) % std::size(edges)];
            std::vector<float> expected(gate.size()), got(gate.size()), in_place = gate;
            kernels::reference::swiglu(gate.data(), up.data(), expected.data(), n);
            swiglu_with(isa, gate.data(), up.data(), got.data(), n);
            EXPECT_TRUE(same_bits(expected, got, got.size())) << isa_name(isa) << " n " << n;
            swiglu_with(isa, in_place.data(), up.data(), in_place.data(), n);  // as llama.cpp calls it
            EXPECT_TRUE(same_bits(expected, in_place, got.size())) << isa_name(isa) << " in place, n " << n;
        }
    }
}

// out = (g / (1 + e)) · up with e = exp_f32(-g) within 1 ulp (<= 2u relative); then 1 + e, the division
// and the product round once each (u), and 1 + e carries e's error scaled by e/(1+e) < 1: at most
// 2u + u + u + u = 5u relative to first order. The bound uses twice that.
TEST(Swiglu, MatchesDoubleReference) {
    for (Isa isa : available_isas()) {
        const int64_t n = 4099;
        const std::vector<float> gate = random_vector(static_cast<size_t>(n), 1, 6.0f);
        const std::vector<float> up = random_vector(static_cast<size_t>(n), 2, 2.0f);
        std::vector<float> out(gate.size());
        swiglu_with(isa, gate.data(), up.data(), out.data(), n);
        for (size_t i = 0; i < gate.size(); ++i) {
            const double g = gate[i];
            const double ref = g / (1.0 + std::exp(-g)) * up[i];
            ASSERT_NEAR(out[i], ref, 10 * kUnit * std::fabs(ref)) << isa_name(isa) << " gate " << g;
        }
    }
}

// swiglu() is swiglu_with(active_isa()).
TEST(Swiglu, DefaultUsesTheActiveIsa) {
    const std::vector<float> gate = random_vector(100, 3, 3.0f), up = random_vector(100, 4, 1.0f);
    std::vector<float> a(100), b(100);
    swiglu(gate.data(), up.data(), a.data(), 100);
    swiglu_with(active_isa(), gate.data(), up.data(), b.data(), 100);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

}  // namespace
}  // namespace kvstash
