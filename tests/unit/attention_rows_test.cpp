// The SIMD attention inner loops against their scalar references, on every ISA this CPU runs.
// Tolerance: dot of n terms in fp32 with a different summation order differs by at most
// 2·γ_n·Σ|q_i k_i| (γ_n = n·u/(1 - n·u), u = 2^-24); axpy is one FMA vs a rounded multiply-add per
// element, at most 2 ulp of |out| + |w·v| apart. And each ISA bitwise against a scalar model of its own
// arithmetic (lanes, tree, tail).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/attention/attention_rows.h"
#include "format/quantize.h"

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

// The arithmetic each ISA documents (backends/cpu/attention/attention_rows.h), modelled in scalar code and compared
// bitwise: the dot product keeps `lanes` fma partial sums over the element index (element i in lane
// i % lanes, full vectors only), sums them by a fixed pairwise tree (distance lanes/2, ..., 1; the AVX2
// hsum and _mm512_reduce_add_ps both pair that way), then adds the reference dot of the tail; axpy
// is one fma per element of the full vectors and the reference's multiply-then-add on the tail. The rows
// sit at every offset of a buffer (alignment must not matter). A kernel that reorders its sums, fuses or
// splits a product, or treats the tail differently fails here even where it stays within the rounding
// bound of SimdMatchesReferenceOnEveryIsa.
float modelled_dot(int lanes, const float* q, const std::vector<uint8_t>& k_row, size_t first, int64_t n,
                   TensorType type) {
    const int64_t full = lanes == 1 ? 0 : n / lanes * lanes;
    std::vector<float> acc(static_cast<size_t>(lanes), 0.0f);
    for (int64_t i = 0; i < full; ++i) {
        float& a = acc[static_cast<size_t>(i % lanes)];
        a = std::fma(q[i], stored(k_row, first + static_cast<size_t>(i), type), a);
    }
    for (int width = lanes / 2; width >= 1; width /= 2) {
        for (int l = 0; l < width; ++l) acc[static_cast<size_t>(l)] += acc[static_cast<size_t>(l + width)];
    }
    float tail = 0.0f;
    for (int64_t i = full; i < n; ++i) tail += q[i] * stored(k_row, first + static_cast<size_t>(i), type);
    return lanes == 1 ? tail : acc[0] + tail;
}

void modelled_axpy(int lanes, float* out, float w, const std::vector<uint8_t>& v_row, size_t first, int64_t n,
                   TensorType type) {
    const int64_t full = lanes == 1 ? 0 : n / lanes * lanes;
    for (int64_t i = 0; i < n; ++i) {
        const float v = stored(v_row, first + static_cast<size_t>(i), type);
        out[i] = i < full ? std::fma(w, v, out[i]) : out[i] + w * v;
    }
}

int lanes_of(Isa isa) { return isa == Isa::avx512 ? 16 : isa == Isa::avx2 ? 8 : 1; }

TEST(AttentionRows, EachIsaFollowsItsLaneOrderBitwise) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (Isa isa : available_isas()) {
        const AttentionRowOps ops = attention_row_ops(isa);
        for (TensorType type : {TensorType::F16, TensorType::F32}) {
            for (int64_t n : {1, 7, 8, 15, 16, 17, 24, 64, 100, 128}) {
                for (size_t offset : {0, 1, 3}) {
                    SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(n) + " offset " +
                                 std::to_string(offset) + (type == TensorType::F16 ? " f16" : " f32"));
                    std::vector<float> buffer(static_cast<size_t>(n) + offset), q(buffer.size()), out(buffer.size());
                    for (auto* v : {&buffer, &q, &out})
                        for (float& x : *v) x = normal(rng);
                    const auto row = make_row(buffer, type);
                    const size_t row_offset = offset * (type == TensorType::F16 ? 2 : 4);
                    const float got = ops.dot(q.data() + offset, row.data() + row_offset, n, type);
                    const float want = modelled_dot(lanes_of(isa), q.data() + offset, row, offset, n, type);
                    EXPECT_EQ(0, std::memcmp(&got, &want, 4)) << got << " vs " << want;

                    const float w = normal(rng);
                    std::vector<float> got_out = out, want_out = out;
                    ops.axpy(got_out.data() + offset, w, row.data() + row_offset, n, type);
                    modelled_axpy(lanes_of(isa), want_out.data() + offset, w, row, offset, n, type);
                    EXPECT_EQ(0, std::memcmp(got_out.data(), want_out.data(), 4 * got_out.size()));
                }
            }
        }
    }
}

// q8_0 rows are read as d * q, exact in f32 (backends/cpu/attention/attention_rows.h): on the scalar and AVX2 paths
// (AVX-512 machines read q8_0 with the AVX2 kernels, backends/cpu/attention/attention.cpp) dot and axpy over a q8_0 row
// give the bits they give over the f32 row of its decoded values, for rows whose scales span the f16 range (subnormal
// scales included) and for a head that starts at a later block of the row.
TEST(AttentionRows, Q8_0ReadsExactlyItsDecodedValues) {
    std::mt19937 rng(23);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (Isa isa : available_isas()) {
        if (isa == Isa::avx512) continue;
        const AttentionRowOps ops = attention_row_ops(isa);
        for (float magnitude : {1.0f, 1e-6f, 3e4f}) {
            for (int64_t n : {32, 64, 128, 256}) {
                SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(n) + " magnitude " +
                             std::to_string(magnitude));
                const int64_t first = 32;  // the head starts at the row's second block
                std::vector<float> raw(static_cast<size_t>(first + n)), decoded(raw.size()), q(raw.size());
                for (float& x : raw) x = normal(rng) * magnitude;
                for (float& x : q) x = normal(rng);
                std::vector<uint8_t> row(static_cast<size_t>((first + n) / 32 * 34));
                quantize_row_q8_0(raw.data(), row.data(), first + n);
                dequantize_row(TensorType::Q8_0, row.data(), decoded.data(), first + n);
                const auto f32_row = make_row(decoded, TensorType::F32);
                const uint8_t* q8_head = row.data() + kv_row_offset(TensorType::Q8_0, first);
                const uint8_t* f32_head = f32_row.data() + kv_row_offset(TensorType::F32, first);
                const float got = ops.dot(q.data(), q8_head, n, TensorType::Q8_0);
                const float want = ops.dot(q.data(), f32_head, n, TensorType::F32);
                EXPECT_EQ(0, std::memcmp(&got, &want, 4)) << got << " vs " << want;
                std::vector<float> got_out(q.begin(), q.begin() + n), want_out = got_out;
                const float w = normal(rng);
                ops.axpy(got_out.data(), w, q8_head, n, TensorType::Q8_0);
                ops.axpy(want_out.data(), w, f32_head, n, TensorType::F32);
                EXPECT_EQ(0, std::memcmp(got_out.data(), want_out.data(), 4 * got_out.size()));
            }
        }
    }
}

}  // namespace
}  // namespace kvstash::kernels
