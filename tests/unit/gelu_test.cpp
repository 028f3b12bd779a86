// gelu (backends/cpu/activation/gelu.h): every ISA this CPU runs bitwise equal to the scalar reference (odd lengths,
// tails, large |x|, zeros, infinities), in place, and against the formula in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/activation/gelu.h"
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

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(Gelu, EveryIsaEqualsReferenceBitwise) {
    const float inf = std::numeric_limits<float>::infinity();
    for (Isa isa : available_isas()) {
        for (int64_t n : {0, 1, 3, 8, 13, 16, 17, 40, 1536, 1541}) {
            std::vector<float> x = random_vector(static_cast<size_t>(n), static_cast<uint32_t>(n), 4.0f);
            const float edges[] = {0.0f, -0.0f, 12.0f, -12.0f, 200.0f, -200.0f, inf, -inf, 1e-30f, -1e-30f};
            for (size_t i = 5; i < x.size(); i += 11) x[i] = edges[(i / 11) % std::size(edges)];
            std::vector<float> expected(x.size()), got(x.size()), in_place = x;
            kernels::reference::gelu(x.data(), expected.data(), n);
            gelu_with(isa, x.data(), got.data(), n);
            EXPECT_TRUE(same_bits(expected, got)) << isa_name(isa) << " n " << n;
            gelu_with(isa, in_place.data(), in_place.data(), n);
            EXPECT_TRUE(same_bits(expected, in_place)) << isa_name(isa) << " in place, n " << n;
        }
    }
}

// Against the formula in double, in its sigmoid form x / (1 + e^(-2v)), v = sqrt(2/pi) (x + 0.044715 x³)
// (equal to 0.5 x (1 + tanh v); the tanh form cancels in double for v << 0). Ours: x², the polynomial and
// u = x·p round 4 times (4u relative on u = 2v, i.e. an absolute error of 4u·|u| in the exponent);
// exp_f32 within 1 ulp (2u); 1 + e and the division: 2u. The result's relative error follows the
// exponent's absolute error, so it is below (8 + 4|u|)u; the bound takes (10 + 6|u|)u. Below u = -88.7,
// 1 + e^-u overflows to +inf and the result is ±0 where the true one is below |x|·2^-126 (subnormal):
// that much absolute error is allowed too.
TEST(Gelu, MatchesFormulaInDouble) {
    for (Isa isa : available_isas()) {
        const int64_t n = 4099;
        const std::vector<float> x = random_vector(static_cast<size_t>(n), 1, 3.0f);
        std::vector<float> out(x.size());
        gelu_with(isa, x.data(), out.data(), n);
        for (size_t i = 0; i < x.size(); ++i) {
            const double v = x[i];
            const double u = 2.0 * std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
            const double ref = v / (1.0 + std::exp(-u));
            const double tanh_form = 0.5 * v * (1.0 + std::tanh(u / 2));
            if (std::fabs(u) < 1) {
                ASSERT_NEAR(ref, tanh_form, 1e-15) << "the two forms agree where tanh is exact";
            }
            ASSERT_NEAR(out[i], ref, (10 + 6 * std::fabs(u)) * kUnit * std::fabs(ref) + std::fabs(v) * 0x1p-126)
                << isa_name(isa) << " x " << v;
        }
    }
}

// Limits: gelu(0) = 0, large positive x gives x, large negative x gives (minus) zero.
TEST(Gelu, Limits) {
    const float x[] = {0.0f, 30.0f, 1000.0f, -30.0f, -1000.0f};
    float out[5];
    gelu(x, out, 5);
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_EQ(out[1], 30.0f);
    EXPECT_EQ(out[2], 1000.0f);
    EXPECT_EQ(out[3], 0.0f);
    EXPECT_EQ(out[4], 0.0f);
}

}  // namespace
}  // namespace kvstash
