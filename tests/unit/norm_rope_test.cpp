// rms_norm_row against a double reference on every ISA, and every ISA bitwise equal to the scalar
// reference (16-lane sum structure, backends/cpu/norm/norm.h); RopeTable: angles against the documented formula
// (base, frequency factors, linear position scaling), the pairs each layout rotates, partial rotation,
// norm preservation, position 0 as the identity, and apply_with bitwise the scalar reference on every ISA.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backends/cpu/norm/norm.h"
#include "backends/cpu/rope/rope.h"
#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {
namespace {

constexpr double kUnit = 0x1p-24;  // unit roundoff of fp32

std::vector<float> random_vector(size_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, sigma);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
}

// ---------------------------------------------------------------------------------------------- RMSNorm

// out[i] = w[i]·x[i]/sqrt(mean(x²) + eps). fp32 steps after the double sum: the mean rounded to float,
// + eps, sqrt, 1/·, x·scale, w·(...): six roundings of at most u each (sqrt's relative effect is u/2), so
// |out - ref| <= 6u·|ref| to first order; 8u leaves room for the second-order terms.
void check_rms_norm(const std::vector<float>& x, float eps, uint32_t seed) {
    const auto n = static_cast<int64_t>(x.size());
    const std::vector<float> w = random_vector(x.size(), seed, 1.0f);
    double sum_sq = 0.0;
    for (float v : x) sum_sq += static_cast<double>(v) * v;
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
    for (Isa isa : available_isas()) {
        std::vector<float> out(x.size());
        rms_norm_row_with(isa, x.data(), w.data(), out.data(), n, eps);
        for (size_t i = 0; i < x.size(); ++i) {
            const double ref = static_cast<double>(w[i]) * x[i] * inv_rms;
            ASSERT_NEAR(out[i], ref, 8 * kUnit * std::fabs(ref)) << isa_name(isa) << " n " << n << " element " << i;
        }
    }
}

TEST(RmsNorm, MatchesDoubleReference) {
    for (int64_t n : {1, 7, 64, 576, 2048}) {
        check_rms_norm(random_vector(static_cast<size_t>(n), static_cast<uint32_t>(n)), 1e-5f, 5);
        check_rms_norm(random_vector(static_cast<size_t>(n), static_cast<uint32_t>(n) + 1, 30.0f), 1e-6f, 6);
    }
}

// Small inputs: eps is a large part of the denominator, so leaving it out (or adding it after the sqrt)
// is far outside the tolerance.
TEST(RmsNorm, EpsilonMattersForSmallInputs) {
    check_rms_norm(random_vector(64, 17, 1e-3f), 1e-5f, 8);
    check_rms_norm(random_vector(64, 18, 1e-3f), 1e-6f, 9);
}

// Squares of very different sizes: 1e8 followed by 4096 ones. A float accumulator loses every one of them
// (1 is below half an ulp of 1e8); the double sum the header promises keeps them.
TEST(RmsNorm, SmallSquaresAreNotLostNextToALargeOne) {
    std::vector<float> x(4097, 1.0f);
    x[0] = 1e4f;
    check_rms_norm(x, 1e-5f, 10);
}

// The 16 partial sums and their fixed combination (backends/cpu/norm/norm.h) make every ISA give the reference's
// bits: lengths around the 8/16-lane boundaries, long rows, values of very different sizes (so that a
// different summation order changes the last bits of the double sum, compared directly: the float mean
// rounds most such differences away).
TEST(RmsNorm, EveryIsaEqualsReferenceBitwise) {
    std::vector<int64_t> lengths = {576, 2048, 4097};
    for (int64_t n = 1; n <= 70; ++n) lengths.push_back(n);
    for (int64_t n : lengths) {
        std::vector<float> x = random_vector(static_cast<size_t>(n), static_cast<uint32_t>(n) + 100, 3.0f);
        for (size_t i = 3; i < x.size(); i += 7) x[i] *= 1e4f;
        for (size_t i = 5; i < x.size(); i += 13) x[i] = 1e-20f;
        const std::vector<float> w = random_vector(x.size(), static_cast<uint32_t>(n) + 200, 1.0f);
        std::vector<float> expected(x.size());
        rms_norm_row_with(Isa::scalar, x.data(), w.data(), expected.data(), n, 1e-5f);
        // The reference is the documented sequence: 16 partial sums, the tree, then the scale.
        double acc[16] = {};
        for (size_t i = 0; i < x.size(); ++i) acc[i % 16] += static_cast<double>(x[i]) * x[i];
        for (int width = 8; width >= 1; width /= 2) {
            for (int k = 0; k < width; ++k) acc[k] += acc[k + width];
        }
        EXPECT_EQ(kernels::reference::sum_of_squares(x.data(), n), acc[0]) << "n " << n;
        for (Isa isa : available_isas()) {
            EXPECT_EQ(kernels::sum_of_squares(isa, x.data(), n), acc[0]) << isa_name(isa) << " n " << n;
            std::vector<float> got(x.size() + 1, 7.0f);
            rms_norm_row_with(isa, x.data(), w.data(), got.data(), n, 1e-5f);
            EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), x.size() * sizeof(float)))
                << isa_name(isa) << " n " << n;
            EXPECT_EQ(got[x.size()], 7.0f) << isa_name(isa) << ": wrote past the end";
        }
    }
}

TEST(RmsNorm, DefaultUsesTheActiveIsa) {
    const std::vector<float> x = random_vector(576, 3), w = random_vector(576, 4);
    std::vector<float> a(576), b(576);
    rms_norm_row(x.data(), w.data(), a.data(), 576, 1e-5f);
    rms_norm_row_with(active_isa(), x.data(), w.data(), b.data(), 576, 1e-5f);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST(RmsNorm, ZeroRowGivesZerosNotNaN) {
    std::vector<float> x(16, 0.0f), w(16, 1.0f), out(16, 1.0f);
    rms_norm_row(x.data(), w.data(), out.data(), 16, 1e-5f);
    for (float v : out) EXPECT_EQ(v, 0.0f);
}

// ------------------------------------------------------------------------------------------------ RoPE

// The rope of heads of head_dim floats.
struct RopeCase {
    RopeParams params;
    int64_t head_dim = 0;
};

RopeCase rope_config(int64_t head_dim, int64_t n_rot, RopeLayout layout, float base = 10000.0f,
                     float linear_factor = 1.0f) {
    RopeCase c;
    c.head_dim = head_dim;
    c.params.n_rot = n_rot;
    c.params.layout = layout;
    c.params.freq_base = base;
    c.params.linear_factor = linear_factor;
    return c;
}

struct Angles {
    std::vector<float> cos, sin;
};

Angles angles_at(const RopeTable& rope, int64_t n_rot, int64_t pos) {
    Angles a{std::vector<float>(static_cast<size_t>(n_rot / 2)), std::vector<float>(static_cast<size_t>(n_rot / 2))};
    rope.angles(pos, a.cos.data(), a.sin.data());
    return a;
}

// theta_i = pos / linear_factor · base^(-2i/n_rot) / freq_factor[i]. The table computes it in fp32 (as the
// reference implementations do): 2i/n_rot, powf, 1/·, /factor, pos·scale, ·inv_freq. Rounding the
// exponent e moves base^e by ln(base)·e·u relative; the other steps are ~6 roundings (powf up to 2u), so
// |Δtheta| <= (8 + ln(base)·e)·u·theta, and cos/sin (rounded to float) add u. The bound uses 2x.
void check_angles(const RopeTable& rope, const RopeCase& c, const std::vector<float>& factors, int64_t pos) {
    const Angles a = angles_at(rope, c.params.n_rot, pos);
    for (int64_t i = 0; i < c.params.n_rot / 2; ++i) {
        const auto is = static_cast<size_t>(i);
        double theta =
            static_cast<double>(pos) / c.params.linear_factor *
            std::pow(static_cast<double>(c.params.freq_base), -2.0 * static_cast<double>(i) / c.params.n_rot);
        if (!factors.empty()) theta /= factors[is];
        const double e = 2.0 * static_cast<double>(i) / static_cast<double>(c.params.n_rot);
        const double tol = 2 * ((8 + std::log(static_cast<double>(c.params.freq_base)) * e) * kUnit * theta + kUnit);
        EXPECT_NEAR(a.cos[is], std::cos(theta), tol) << "pos " << pos << " pair " << i;
        EXPECT_NEAR(a.sin[is], std::sin(theta), tol) << "pos " << pos << " pair " << i;
    }
}

TEST(Rope, AnglesFollowBaseAndPosition) {
    for (float base : {10000.0f, 500000.0f}) {
        const RopeCase c = rope_config(64, 64, RopeLayout::normal, base);
        const RopeTable rope(c.params, c.head_dim, {});
        for (int64_t pos : {1, 2, 37, 1000}) check_angles(rope, c, {}, pos);
    }
    // Partial rotation: the exponent is 2i / n_rot, not 2i / head_dim.
    const RopeCase partial = rope_config(64, 16, RopeLayout::neox);
    const RopeTable rope(partial.params, partial.head_dim, {});
    for (int64_t pos : {1, 37, 500}) check_angles(rope, partial, {}, pos);
}

TEST(Rope, FrequencyFactorsDivideTheFrequencies) {
    const RopeCase c = rope_config(16, 16, RopeLayout::normal);
    const std::vector<float> factors = {1.0f, 2.0f, 4.0f, 8.0f, 16.0f, 3.0f, 40.0f, 0.5f};
    const RopeTable scaled(c.params, c.head_dim, factors);
    const RopeTable plain(c.params, c.head_dim, {});
    for (int64_t pos : {1, 5, 37, 300}) check_angles(scaled, c, factors, pos);
    // Pair 0 has factor 1: unchanged; pair 1 at position 2 with factor 2 turns like position 1 unscaled.
    const Angles s2 = angles_at(scaled, 16, 2), p1 = angles_at(plain, 16, 1), p2 = angles_at(plain, 16, 2);
    EXPECT_EQ(s2.cos[0], p2.cos[0]);
    EXPECT_EQ(s2.cos[1], p1.cos[1]);  // 2·(inv/2) == inv exactly
    EXPECT_EQ(s2.sin[1], p1.sin[1]);
}

TEST(Rope, LinearScalingDividesPositions) {
    const RopeCase c4 = rope_config(32, 32, RopeLayout::normal, 10000.0f, 4.0f);
    const RopeCase c1 = rope_config(32, 32, RopeLayout::normal);
    const RopeTable scaled(c4.params, c4.head_dim, {}), plain(c1.params, c1.head_dim, {});
    for (int64_t pos : {3, 37, 999}) check_angles(scaled, c4, {}, pos);
    // pos·(1/4) is exact for these positions, so the angles equal those of pos/4 bitwise.
    for (int64_t pos : {4, 40, 4000}) {
        const Angles a = angles_at(scaled, 32, pos), b = angles_at(plain, 32, pos / 4);
        EXPECT_EQ(0, std::memcmp(a.cos.data(), b.cos.data(), a.cos.size() * sizeof(float))) << "pos " << pos;
        EXPECT_EQ(0, std::memcmp(a.sin.data(), b.sin.data(), a.sin.size() * sizeof(float))) << "pos " << pos;
    }
}

TEST(Rope, PositionZeroIsTheIdentity) {
    for (RopeLayout layout : {RopeLayout::normal, RopeLayout::neox}) {
        const RopeCase c = rope_config(16, 12, layout);
        const RopeTable rope(c.params, c.head_dim, {0.5f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f});
        const Angles a = angles_at(rope, 12, 0);
        for (size_t i = 0; i < a.cos.size(); ++i) {
            EXPECT_EQ(a.cos[i], 1.0f);
            EXPECT_EQ(a.sin[i], 0.0f);
        }
        const std::vector<float> x = random_vector(3 * 16, 21);
        std::vector<float> y = x;
        rope.apply(y.data(), 3, a.cos.data(), a.sin.data());
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)));
    }
}

// Rotating a unit vector e_k must produce (cos, sin) in exactly the two dims of k's pair and leave every
// other dim zero: that pins down which dims form a pair, and the direction of rotation
// (x' = x·cos - y·sin, y' = x·sin + y·cos, as in Hugging Face's rotate_half).
void check_pairs(RopeLayout layout, int64_t head_dim, int64_t n_rot) {
    const RopeCase c = rope_config(head_dim, n_rot, layout);
    const RopeTable rope(c.params, c.head_dim, {});
    const Angles a = angles_at(rope, n_rot, 7);
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; ++i) {
        const int64_t first = layout == RopeLayout::normal ? 2 * i : i;
        const int64_t second = layout == RopeLayout::normal ? 2 * i + 1 : i + half;
        const auto is = static_cast<size_t>(i);
        for (int which = 0; which < 2; ++which) {
            std::vector<float> x(static_cast<size_t>(head_dim), 0.0f);
            x[static_cast<size_t>(which == 0 ? first : second)] = 1.0f;
            rope.apply(x.data(), 1, a.cos.data(), a.sin.data());
            for (int64_t d = 0; d < head_dim; ++d) {
                float expected = 0.0f;
                if (d == first) expected = which == 0 ? a.cos[is] : -a.sin[is];
                if (d == second) expected = which == 0 ? a.sin[is] : a.cos[is];
                EXPECT_EQ(x[static_cast<size_t>(d)], expected)
                    << (layout == RopeLayout::normal ? "normal" : "neox") << " pair " << i << " input "
                    << (which == 0 ? first : second) << " dim " << d;
            }
        }
    }
}

TEST(Rope, NormalLayoutRotatesAdjacentPairs) { check_pairs(RopeLayout::normal, 16, 16); }
TEST(Rope, NeoxLayoutRotatesHalves) { check_pairs(RopeLayout::neox, 16, 16); }
TEST(Rope, PartialRotationPairsWithinTheRotatedDims) {
    check_pairs(RopeLayout::normal, 16, 8);
    check_pairs(RopeLayout::neox, 16, 8);  // neox pairs (i, i + n_rot/2), not (i, i + head_dim/2)
}

// n_rot < head_dim: dims n_rot..head_dim-1 of every head are left bitwise untouched; each head is
// rotated by the same angles at its own offset.
TEST(Rope, PartialRotationLeavesTheRestAndEachHeadAlike) {
    for (RopeLayout layout : {RopeLayout::normal, RopeLayout::neox}) {
        const int64_t head_dim = 12, n_rot = 4, n_heads = 3;
        const RopeCase c = rope_config(head_dim, n_rot, layout);
        const RopeTable rope(c.params, c.head_dim, {});
        const Angles a = angles_at(rope, n_rot, 123);
        const std::vector<float> one_head = random_vector(static_cast<size_t>(head_dim), 31);
        std::vector<float> x;
        for (int64_t h = 0; h < n_heads; ++h) x.insert(x.end(), one_head.begin(), one_head.end());
        std::vector<float> rotated_one = one_head;
        rope.apply(rotated_one.data(), 1, a.cos.data(), a.sin.data());
        rope.apply(x.data(), n_heads, a.cos.data(), a.sin.data());
        for (int64_t h = 0; h < n_heads; ++h) {
            for (int64_t d = 0; d < head_dim; ++d) {
                const float got = x[static_cast<size_t>(h * head_dim + d)];
                EXPECT_EQ(got, rotated_one[static_cast<size_t>(d)]) << "head " << h << " dim " << d;
                if (d >= n_rot)
                    EXPECT_EQ(got, one_head[static_cast<size_t>(d)]) << "head " << h << " dim " << d;
                else
                    EXPECT_NE(got, one_head[static_cast<size_t>(d)]) << "head " << h << " dim " << d;
            }
        }
    }
}

// apply_with on every ISA gives the scalar reference's bits, for both layouts, head sizes around the 4/8/16-
// pair vector steps (and their tails), partial rotation, several heads and positions.
TEST(Rope, EveryIsaEqualsReferenceBitwise) {
    for (RopeLayout layout : {RopeLayout::normal, RopeLayout::neox}) {
        for (auto [head_dim, n_rot] : {std::pair<int64_t, int64_t>{4, 4},
                                       {12, 12},
                                       {16, 16},
                                       {20, 18},
                                       {32, 32},
                                       {48, 48},
                                       {64, 64},
                                       {64, 32},
                                       {80, 80},
                                       {128, 128},
                                       {128, 64},
                                       {256, 256}}) {
            const RopeCase c = rope_config(head_dim, n_rot, layout);
            const RopeTable rope(c.params, c.head_dim, {});
            const int64_t n_heads = 3;
            for (int64_t pos : {1, 37, 5000}) {
                const Angles a = angles_at(rope, n_rot, pos);
                const auto seed = static_cast<uint32_t>(head_dim + pos);
                const std::vector<float> x = random_vector(static_cast<size_t>(n_heads * head_dim + 1), seed, 5.0f);
                std::vector<float> expected = x;
                rope.apply_with(Isa::scalar, expected.data(), n_heads, a.cos.data(), a.sin.data());
                for (Isa isa : available_isas()) {
                    std::vector<float> got = x;
                    rope.apply_with(isa, got.data(), n_heads, a.cos.data(), a.sin.data());
                    EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), x.size() * sizeof(float)))
                        << isa_name(isa) << (layout == RopeLayout::normal ? " normal" : " neox") << " head_dim "
                        << head_dim << " n_rot " << n_rot << " pos " << pos;
                }
            }
        }
    }
}

// |(x', y')| = |(x, y)|: cos² + sin² = 1 within 2u (each rounded to float), the rotation itself adds
// ~4u relative (two products and a sum per output), so 8u·|pair| bounds the change; 16u with margin.
TEST(Rope, RotationPreservesEachPairsNorm) {
    for (RopeLayout layout : {RopeLayout::normal, RopeLayout::neox}) {
        const int64_t head_dim = 64, n_heads = 4, half = head_dim / 2;
        const RopeCase c = rope_config(head_dim, head_dim, layout);
        const RopeTable rope(c.params, c.head_dim, {});
        for (int64_t pos : {1, 17, 4095}) {
            const Angles a = angles_at(rope, head_dim, pos);
            const std::vector<float> x =
                random_vector(static_cast<size_t>(n_heads * head_dim), static_cast<uint32_t>(40 + pos), 3.0f);
            std::vector<float> y = x;
            rope.apply(y.data(), n_heads, a.cos.data(), a.sin.data());
            for (int64_t h = 0; h < n_heads; ++h) {
                for (int64_t i = 0; i < half; ++i) {
                    const int64_t p = h * head_dim + (layout == RopeLayout::normal ? 2 * i : i);
                    const int64_t q = h * head_dim + (layout == RopeLayout::normal ? 2 * i + 1 : i + half);
                    auto norm = [&](const std::vector<float>& v) {
                        return std::hypot(static_cast<double>(v[static_cast<size_t>(p)]),
                                          static_cast<double>(v[static_cast<size_t>(q)]));
                    };
                    EXPECT_NEAR(norm(y), norm(x), 16 * kUnit * norm(x))
                        << "pos " << pos << " head " << h << " pair " << i;
                }
            }
        }
    }
}

}  // namespace
}  // namespace kvstash
