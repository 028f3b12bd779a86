// The attention inner loops (backends/cpu/attention/attention_rows.h): one arithmetic on every ISA. The scalar
// reference is checked against a model of the documented arithmetic written here (16 fma lanes, the canonical
// tree) and against a double-precision dot within the rounding bound; every ISA this CPU runs is compared
// bitwise with the reference, for f16, f32 and q8_0 rows, lengths that are and are not multiples of 16, and
// rows at any alignment.
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

// The reference's dot is the exact dot within 2·γ_n·Σ|q_i k_i| (γ_n = n·u/(1 - n·u), u = 2^-24): any order of
// fp32 sums is.
TEST(AttentionRows, ReferenceDotIsWithinRoundingOfTheExactDot) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    constexpr double u = 1.0 / (1 << 24);
    for (TensorType type : {TensorType::F16, TensorType::F32}) {
        for (int64_t n : {1, 7, 8, 16, 24, 64, 100, 128, 256}) {
            SCOPED_TRACE("n=" + std::to_string(n) + (type == TensorType::F16 ? " f16" : " f32"));
            std::vector<float> q(static_cast<size_t>(n)), k(static_cast<size_t>(n));
            for (auto* v : {&q, &k})
                for (float& x : *v) x = normal(rng);
            const auto k_row = make_row(k, type);
            double exact = 0.0, abs_sum = 0.0;
            for (size_t i = 0; i < q.size(); ++i) {
                exact += static_cast<double>(q[i]) * stored(k_row, i, type);
                abs_sum += std::fabs(static_cast<double>(q[i]) * stored(k_row, i, type));
            }
            const double gamma = static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u);
            EXPECT_NEAR(reference::attention_dot(q.data(), k_row.data(), n, type), exact, 2.0 * gamma * abs_sum);
        }
    }
}

// The arithmetic attention_rows.h documents, modelled here in plain scalar code: the dot product keeps 16 fma
// partial sums over the element index (element i in lane i % 16), sums them by the canonical tree (distance 8,
// 4, 2, 1); axpy is one fma per element. The reference must be exactly this; a kernel that reorders its sums,
// fuses or splits a product, or treats the tail differently fails here or in EveryIsaEqualsTheReferenceBitwise.
float modelled_dot(const float* q, const std::vector<uint8_t>& k_row, size_t first, int64_t n, TensorType type) {
    float acc[16] = {};
    for (int64_t i = 0; i < n; ++i) {
        float& a = acc[i % 16];
        a = std::fma(q[i], stored(k_row, first + static_cast<size_t>(i), type), a);
    }
    for (int width = 8; width >= 1; width /= 2) {
        for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
    }
    return acc[0];
}

TEST(AttentionRows, ReferenceIsTheDocumentedArithmetic) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (TensorType type : {TensorType::F16, TensorType::F32}) {
        for (int64_t n : {1, 7, 8, 15, 16, 17, 24, 64, 100, 128, 256}) {
            SCOPED_TRACE("n=" + std::to_string(n) + (type == TensorType::F16 ? " f16" : " f32"));
            std::vector<float> k(static_cast<size_t>(n)), q(k.size()), out(k.size());
            for (auto* v : {&k, &q, &out})
                for (float& x : *v) x = normal(rng);
            const auto row = make_row(k, type);
            const float got = reference::attention_dot(q.data(), row.data(), n, type);
            const float want = modelled_dot(q.data(), row, 0, n, type);
            EXPECT_EQ(0, std::memcmp(&got, &want, 4)) << got << " vs " << want;
            const float w = normal(rng);
            std::vector<float> got_out = out, want_out = out;
            reference::attention_axpy(got_out.data(), w, row.data(), n, type);
            for (size_t i = 0; i < want_out.size(); ++i) want_out[i] = std::fma(w, stored(row, i, type), want_out[i]);
            EXPECT_EQ(0, std::memcmp(got_out.data(), want_out.data(), 4 * got_out.size()));
        }
    }
}

// Every ISA gives the reference's bits, dot and axpy, f16 / f32 / q8_0 rows (q8_0: whole blocks of 32), at every
// offset of a buffer (alignment must not matter).
TEST(AttentionRows, EveryIsaEqualsTheReferenceBitwise) {
    std::mt19937 rng(13);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (Isa isa : available_isas()) {
        const AttentionRowOps ops = attention_row_ops(isa);
        for (TensorType type : {TensorType::F16, TensorType::F32, TensorType::Q8_0}) {
            for (int64_t n : {1, 7, 8, 15, 16, 17, 24, 32, 64, 80, 96, 100, 128, 256}) {
                if (type == TensorType::Q8_0 && n % 32 != 0) continue;
                for (size_t offset : {0, 1, 3}) {
                    SCOPED_TRACE(std::string(isa_name(isa)) + " n=" + std::to_string(n) + " offset " +
                                 std::to_string(offset) + " " + tensor_type_name(static_cast<uint32_t>(type)));
                    std::vector<float> values(static_cast<size_t>(n)), q(values.size() + offset), out(q.size());
                    for (auto* v : {&values, &q, &out})
                        for (float& x : *v) x = normal(rng);
                    std::vector<uint8_t> row;
                    if (type == TensorType::Q8_0) {
                        row.assign(static_cast<size_t>(n / 32 * 34) + offset, 0);
                        quantize_row_q8_0(values.data(), row.data() + offset, n);
                    } else {
                        std::vector<float> shifted(offset, 0.0f);
                        shifted.insert(shifted.end(), values.begin(), values.end());
                        row = make_row(shifted, type);
                    }
                    // The row starts `offset` bytes (q8_0) or elements (f16, f32) into its buffer.
                    const size_t element_bytes = type == TensorType::F16 ? 2 : type == TensorType::F32 ? 4 : 1;
                    const uint8_t* k = row.data() + offset * element_bytes;
                    const float got = ops.dot(q.data() + offset, k, n, type);
                    const float want = reference::attention_dot(q.data() + offset, k, n, type);
                    EXPECT_EQ(0, std::memcmp(&got, &want, 4)) << got << " vs " << want;

                    const float w = normal(rng);
                    std::vector<float> got_out = out, want_out = out;
                    ops.axpy(got_out.data() + offset, w, k, n, type);
                    reference::attention_axpy(want_out.data() + offset, w, k, n, type);
                    EXPECT_EQ(0, std::memcmp(got_out.data(), want_out.data(), 4 * got_out.size()));
                }
            }
        }
    }
}

// q8_0 rows are read as d * q, exact in f32 (backends/cpu/attention/attention_rows.h): on every path dot and axpy over
// a q8_0 row give the bits they give over the f32 row of its decoded values, for rows whose scales span the f16 range
// (subnormal scales included) and for a head that starts at a later block of the row.
TEST(AttentionRows, Q8_0ReadsExactlyItsDecodedValues) {
    std::mt19937 rng(23);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (Isa isa : available_isas()) {
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
