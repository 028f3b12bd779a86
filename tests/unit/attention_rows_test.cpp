// The SIMD attention inner loops against their scalar references, on every ISA this CPU runs.
// Tolerance: dot of n terms in fp32 with a different summation order differs by at most
// 2·γ_n·Σ|q_i k_i| (γ_n = n·u/(1 - n·u), u = 2^-24); axpy is one FMA vs a rounded multiply-add per
// element, at most 2 ulp of |out| + |w·v| apart.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention_rows.h"

namespace kvstash::kernels {
namespace {

std::vector<uint8_t> make_row(const std::vector<float>& values, TensorType type) {
    std::vector<uint8_t> row(values.size() * (type == TensorType::F16 ? 2 : 4));
    for (size_t i = 0; i < values.size(); ++i) {
        if (type == TensorType::F16) {
            const uint16_t h = fp32_to_fp16(values[i]);
            std::memcpy(row.data() + 2 * i, &h, 2);
        } else {
            std::memcpy(row.data() + 4 * i, &values[i], 4);
        }
    }
    return row;
}

float stored(const std::vector<uint8_t>& row, size_t i, TensorType type) {
    if (type == TensorType::F16) {
        uint16_t h;
        std::memcpy(&h, row.data() + 2 * i, 2);
        return fp16_to_fp32(h);
    }
    float f;
    std::memcpy(&f, row.data() + 4 * i, 4);
    return f;
}

TEST(AttentionRows, SimdMatchesReferenceOnEveryIsa) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    constexpr double u = 1.0 / (1 << 24);
    for (Isa isa : available_isas()) {
        const AttentionRowOps ops = attention_row_ops(isa);
        for (TensorType type : {TensorType::F16, TensorType::F32}) {
            for (int64_t n : {1, 7, 8, 16, 24, 64, 100, 128}) {
                SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(n) +
                             (type == TensorType::F16 ? " f16" : " f32"));
                std::vector<float> q(static_cast<size_t>(n)), k(static_cast<size_t>(n)), out(static_cast<size_t>(n));
                for (auto* v : {&q, &k, &out})
                    for (float& x : *v) x = normal(rng);
                const auto k_row = make_row(k, type);
                double abs_sum = 0.0;
                for (size_t i = 0; i < q.size(); ++i) abs_sum += std::fabs(q[i] * stored(k_row, i, type));
                const double gamma = static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u);
                EXPECT_NEAR(ops.dot(q.data(), k_row.data(), n, type),
                            reference::attention_dot(q.data(), k_row.data(), n, type), 2.0 * gamma * abs_sum);

                std::vector<float> got = out, want = out;
                const float w = normal(rng);
                ops.axpy(got.data(), w, k_row.data(), n, type);
                reference::attention_axpy(want.data(), w, k_row.data(), n, type);
                for (size_t i = 0; i < got.size(); ++i) {
                    const double bound = 4.0 * u * (std::fabs(out[i]) + std::fabs(w * stored(k_row, i, type)));
                    EXPECT_NEAR(got[i], want[i], bound) << "element " << i;
                }
            }
        }
    }
}

TEST(AttentionRows, EachIsaIsDeterministic) {
    std::vector<float> q(64), k(64);
    for (size_t i = 0; i < q.size(); ++i) {
        q[i] = std::sin(static_cast<float>(i));
        k[i] = std::cos(static_cast<float>(i) * 0.7f);
    }
    const auto k_row = make_row(k, TensorType::F16);
    for (Isa isa : available_isas()) {
        const AttentionRowOps ops = attention_row_ops(isa);
        const float first = ops.dot(q.data(), k_row.data(), 64, TensorType::F16);
        for (int rep = 0; rep < 10; ++rep) EXPECT_EQ(first, ops.dot(q.data(), k_row.data(), 64, TensorType::F16));
    }
}

}  // namespace
}  // namespace kvstash::kernels
