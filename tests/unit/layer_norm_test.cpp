// layer_norm_row (backends/cpu/norm/layer_norm.h): every ISA this CPU runs gives the same bits (odd lengths, large
// offsets, in place), and the result matches LayerNorm computed in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/norm/layer_norm.h"
#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {
namespace {

constexpr double kUnit = 0x1p-24;

std::vector<float> random_vector(size_t n, uint32_t seed, float mean, float sigma) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(mean, sigma);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
}

TEST(LayerNorm, EveryIsaGivesTheSameBits) {
    for (int64_t n : {1, 7, 16, 17, 64, 100, 768, 1541}) {
        const auto size = static_cast<size_t>(n);
        const std::vector<float> x = random_vector(size, static_cast<uint32_t>(n), 3.0f, 2.0f);
        const std::vector<float> w = random_vector(size, 11, 1.0f, 0.2f);
        const std::vector<float> b = random_vector(size, 12, 0.0f, 0.2f);
        std::vector<float> expected(size);
        layer_norm_row_with(Isa::scalar, x.data(), w.data(), b.data(), expected.data(), n, 1e-5f);
        for (Isa isa : available_isas()) {
            std::vector<float> got(size), in_place = x;
            layer_norm_row_with(isa, x.data(), w.data(), b.data(), got.data(), n, 1e-5f);
            EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), size * sizeof(float))) << isa_name(isa) << " n " << n;
            layer_norm_row_with(isa, in_place.data(), w.data(), b.data(), in_place.data(), n, 1e-5f);
            EXPECT_EQ(0, std::memcmp(expected.data(), in_place.data(), size * sizeof(float)))
                << isa_name(isa) << " in place, n " << n;
        }
    }
}

// Against double: mean and variance from float inputs with double sums (exact to ~n·2^-53); the float mean
// (u), x - mean (u, relative to |x - mean| plus the mean's error u·|mean|), the float variance and
// 1/sqrt (a few u), then c·scale, ·w, + b (u each). With |mean| / std up to 50 the centring error is
// 50u of a unit-variance value: the bound is (60 + 10)u of (|w·ĉ| + |b|) plus the rest.
TEST(LayerNorm, MatchesDouble) {
    for (float offset : {0.0f, 5.0f, 50.0f}) {
        const int64_t n = 769;
        const auto size = static_cast<size_t>(n);
        const std::vector<float> x = random_vector(size, 3, offset, 1.0f);
        const std::vector<float> w = random_vector(size, 4, 1.0f, 0.3f);
        const std::vector<float> b = random_vector(size, 5, 0.0f, 0.3f);
        std::vector<float> out(size);
        layer_norm_row(x.data(), w.data(), b.data(), out.data(), n, 1e-5f);
        double mean = 0.0;
        for (float v : x) mean += v;
        mean /= n;
        double var = 0.0;
        for (float v : x) var += (v - mean) * (v - mean);
        var /= n;
        const double scale = 1.0 / std::sqrt(var + 1e-5);
        for (size_t i = 0; i < size; ++i) {
            const double normed = (x[i] - mean) * scale;
            const double ref = w[i] * normed + b[i];
            const double tol =
                (10 + 2 * std::fabs(offset)) * kUnit * (std::fabs(w[i]) * (std::fabs(normed) + 1) + std::fabs(b[i]));
            ASSERT_NEAR(out[i], ref, tol) << "offset " << offset << " i " << i;
        }
    }
}

// No bias (nullptr) is bias 0.
TEST(LayerNorm, NullBiasIsZeroBias) {
    const std::vector<float> x = random_vector(50, 1, 0.5f, 1.0f), w = random_vector(50, 2, 1.0f, 0.1f);
    const std::vector<float> zero(50, 0.0f);
    std::vector<float> a(50), b(50);
    layer_norm_row(x.data(), w.data(), nullptr, a.data(), 50, 1e-5f);
    layer_norm_row(x.data(), w.data(), zero.data(), b.data(), 50, 1e-5f);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

}  // namespace
}  // namespace kvstash
