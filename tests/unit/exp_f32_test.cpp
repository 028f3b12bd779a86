// exp_f32 (backends/cpu/exp/exp_f32.h): accuracy against e^x in double over a sample of every float, the special
// values (±0, ±inf, NaN, overflow, underflow, subnormal results), and exp_f32_shifted_row on every ISA
// this CPU runs bitwise equal to the scalar reference (odd lengths, tails, large |x|, specials).
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/exp/exp_f32.h"
#include "backends/cpu/runtime/dispatch.h"

namespace kvstash {
namespace {

using kernels::exp_f32;

// |y - e^x| in units of the fp32 ulp at e^x (2^-149 below the normal range). An infinite y or e^x counts
// as 2^128 (the value one ulp above FLT_MAX), so FLT_MAX against an overflowing e^x is about 1 ulp.
double ulp_error(float y, double exact) {
    const double big = std::ldexp(1.0, 128);
    const double yd = std::isinf(y) ? big : static_cast<double>(y);
    const double ex = std::min(exact, big);
    const double at = std::min(ex, static_cast<double>(FLT_MAX));
    int e = 0;
    std::frexp(at, &e);
    const double ulp = at < static_cast<double>(FLT_MIN) ? std::ldexp(1.0, -149) : std::ldexp(1.0, e - 24);
    return std::fabs(yd - ex) / ulp;
}

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// Every 613th bit pattern (7 million inputs, all exponents and both signs) plus a dense random sample of
// [-105, 90], the inputs whose result is neither 0 nor inf nor 1. The bound, 1 ulp, is the measured
// maximum over all 2^32 inputs (0.894, backends/cpu/exp/exp_f32.h) rounded up.
TEST(ExpF32, WithinOneUlpOfDoubleExp) {
    double max_err = 0.0;
    float worst = 0.0f;
    auto check = [&](float x) {
        const double err = ulp_error(exp_f32(x), std::exp(static_cast<double>(x)));
        if (err > max_err) {
            max_err = err;
            worst = x;
        }
    };
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 613) {
        const float x = std::bit_cast<float>(static_cast<uint32_t>(b));
        if (!std::isnan(x)) check(x);
    }
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> range(-105.0f, 90.0f);
    for (int i = 0; i < 1000000; ++i) check(range(rng));
    EXPECT_LE(max_err, 1.0) << "worst x = " << worst;
    std::printf("exp_f32: max error %.3f ulp (at x = %a)\n", max_err, static_cast<double>(worst));
}

TEST(ExpF32, SpecialValues) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(bits(exp_f32(0.0f)), bits(1.0f));
    EXPECT_EQ(bits(exp_f32(-0.0f)), bits(1.0f));
    EXPECT_EQ(bits(exp_f32(-inf)), bits(0.0f));
    EXPECT_EQ(exp_f32(inf), inf);
    EXPECT_EQ(exp_f32(89.0f), inf);
    EXPECT_EQ(exp_f32(88.73f), inf);  // e^88.73 > FLT_MAX
    EXPECT_EQ(exp_f32(1e30f), inf);
    EXPECT_TRUE(std::isfinite(exp_f32(88.72f)));    // e^88.72 = 3.39e38 < FLT_MAX
    EXPECT_EQ(bits(exp_f32(-104.0f)), bits(0.0f));  // e^-104 < 2^-150: rounds to 0
    EXPECT_EQ(bits(exp_f32(-1e30f)), bits(0.0f));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(bits(exp_f32(nan)), bits(nan));
    EXPECT_EQ(bits(exp_f32(-nan)), bits(-nan));
    // Subnormal results are correctly rounded (not flushed): e^-100 = 3.72e-44 = 26.5 · 2^-149 -> 27 · 2^-149.
    EXPECT_EQ(exp_f32(-100.0f), static_cast<float>(std::exp(-100.0)));
    EXPECT_GT(exp_f32(-103.9f), 0.0f);
    EXPECT_EQ(exp_f32(1.0f), static_cast<float>(std::exp(1.0)));
}

// Inputs for the row tests: mostly softmax-like (|x| of a few tens), then the edges.
std::vector<float> mixed_inputs(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 8.0f);
    std::uniform_real_distribution<float> wide(-200.0f, 200.0f);
    const float inf = std::numeric_limits<float>::infinity();
    const float specials[] = {0.0f,
                              -0.0f,
                              inf,
                              -inf,
                              std::numeric_limits<float>::quiet_NaN(),
                              std::bit_cast<float>(0x7fa00001u) /* signalling NaN */,
                              88.72f,
                              88.73f,
                              -87.4f,
                              -103.9f,
                              -104.0f,
                              FLT_MIN,
                              -FLT_MIN,
                              FLT_MAX,
                              -FLT_MAX,
                              1e-30f};
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
        switch (i % 7) {
            case 3: v[i] = wide(rng); break;
            case 5: v[i] = specials[(i / 7) % std::size(specials)]; break;
            default: v[i] = normal(rng); break;
        }
    }
    return v;
}

TEST(ExpF32, ShiftedRowEveryIsaEqualsReferenceBitwise) {
    for (Isa isa : available_isas()) {
        for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 100, 1000, 1027}) {
            for (float shift : {0.0f, 3.5f, -20.0f, 90.0f}) {
                const std::vector<float> in = mixed_inputs(static_cast<size_t>(n), static_cast<uint32_t>(n));
                std::vector<float> expected(in.size()), got(in.size() + 1, 7.0f), in_place = in;
                kernels::reference::exp_f32_shifted_row(in.data(), expected.data(), n, shift);
                kernels::exp_f32_shifted_row(isa, in.data(), got.data(), n, shift);
                EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), in.size() * sizeof(float)))
                    << isa_name(isa) << " n " << n << " shift " << shift;
                EXPECT_EQ(got[in.size()], 7.0f) << isa_name(isa) << ": wrote past the end";
                kernels::exp_f32_shifted_row(isa, in_place.data(), in_place.data(), n, shift);
                EXPECT_EQ(0, std::memcmp(expected.data(), in_place.data(), in.size() * sizeof(float)))
                    << isa_name(isa) << " in place, n " << n;
            }
        }
    }
}

// The reference row is exp_f32 of the rounded difference, element by element.
TEST(ExpF32, ShiftedRowIsExpOfTheDifference) {
    const std::vector<float> in = mixed_inputs(100, 5);
    std::vector<float> out(in.size());
    const float shift = 1.25f;
    kernels::reference::exp_f32_shifted_row(in.data(), out.data(), 100, shift);
    for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(bits(out[i]), bits(exp_f32(in[i] - shift))) << i;
}

}  // namespace
}  // namespace kvstash
