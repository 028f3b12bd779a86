// matmul: every weight type on every ISA this CPU has, against reference::matmul (f32 weight types) or
// the scalar int8-activation definition (quantized types: bitwise, plus a derived error bound against
// the exact product); the decoders against dequantize_row; the integer sums at their bounds; batch
// invariance (bitwise) across n_tokens, chunking, row ranges and thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "support/random_operands.h"

namespace kvstash {
namespace {

using test::put_fp16;
using test::random_activations;
using test::random_weights;
using test::same_bits;

// The column count used for a type in these tests: K-quants need multiples of 256.
int64_t test_cols(TensorType type) { return tensor_type_traits(type).block_size == 256 ? 512 : 576; }

struct Case {
    Isa isa;
    TensorType type;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    return std::string(isa_name(info.param.isa)) + "_" + tensor_type_traits(info.param.type).name;
}

std::vector<Case> all_cases() {
    std::vector<Case> cases;
    for (Isa isa : available_isas())
        for (TensorType type : test::kAllTensorTypes) cases.push_back({isa, type});
    return cases;
}

class MatmulCase : public ::testing::TestWithParam<Case> {};

// Accuracy of the f32 path against the scalar reference. Both compute sum_k w_k * x_k over the same
// exactly decoded w_k (dequantize_row; the kernels decode with the same fp32 operations), in different
// orders (fma, 8/16 lanes, tree sum). For any order, the fp32 result s satisfies the classic bound
//     |s - exact| <= gamma_n * sum_k |w_k x_k|,   gamma_n = n u / (1 - n u),  u = 2^-24,
// with n = cols + 1 (cols - 1 additions, one rounded product, margin). So two such results differ by at
// most 2 gamma_n sum |w_k x_k|. A tiny absolute term covers underflow of subnormal products.
void check_f32_path(Isa isa, TensorType type) {
    const int64_t rows = 45, cols = test_cols(type);
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 1234);
    for (int64_t n_tokens : {1, 5}) {
        const std::vector<float> X = random_activations(n_tokens * cols, 99 + static_cast<uint32_t>(n_tokens));
        std::vector<float> got(static_cast<size_t>(n_tokens * rows)), want(got.size());
        matmul_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, got.data(), nullptr);
        reference::matmul(type, W.data(), rows, cols, X.data(), n_tokens, want.data());
        std::vector<float> w(static_cast<size_t>(cols));
        const double u = std::ldexp(1.0, -24);
        const double n = static_cast<double>(cols + 1);
        const double gamma = n * u / (1 - n * u);
        for (int64_t r = 0; r < rows; ++r) {
            dequantize_row(type, W.data() + r * tensor_row_bytes(type, cols), w.data(), cols);
            for (int64_t t = 0; t < n_tokens; ++t) {
                double abs_sum = 0, exact = 0;
                for (int64_t k = 0; k < cols; ++k) {
                    const double p = double(w[static_cast<size_t>(k)]) * double(X[static_cast<size_t>(t * cols + k)]);
                    abs_sum += std::abs(p);
                    exact += p;
                }
                const float g = got[static_cast<size_t>(t * rows + r)];
                const float ref = want[static_cast<size_t>(t * rows + r)];
                const double tol = 2 * gamma * abs_sum + cols * 1e-44;
                ASSERT_LE(std::abs(double(g) - double(ref)), tol) << "row " << r << " token " << t;
                // The oracle itself obeys the single-result bound against the exact (double) sum.
                ASSERT_LE(std::abs(double(ref) - exact), gamma * abs_sum + cols * 1e-44) << "reference, row " << r;
                ASSERT_LE(std::abs(double(g) - exact), gamma * abs_sum + cols * 1e-44) << "kernel, row " << r;
            }
        }
    }
}

// The part of each decoded weight that comes from a block minimum (q4_1: m; q4_K / q5_K: -dmin·m_j),
// which the int8 path multiplies separately (activation sums): the float error bound counts it twice.
std::vector<double> min_parts(TensorType type, const uint8_t* row, int64_t cols) {
    std::vector<double> b(static_cast<size_t>(cols), 0.0);
    auto half = [](const uint8_t* p) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return double(fp16_to_fp32(h));
    };
    if (type == TensorType::Q4_1) {
        for (int64_t k = 0; k < cols; ++k) b[static_cast<size_t>(k)] = half(row + 20 * (k / 32) + 2);
    } else if (type == TensorType::Q4_K || type == TensorType::Q5_K) {
        const int64_t bytes = type == TensorType::Q4_K ? 144 : 176;
        for (int64_t k = 0; k < cols; ++k) {
            const uint8_t* blk = row + bytes * (k / 256);
            const int j = static_cast<int>(k % 256 / 32);
            const uint8_t* sc = blk + 4;
            const int m = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
            b[static_cast<size_t>(k)] = -half(blk + 2) * m;
        }
    }
    return b;
}

// The integer-activation path. (1) Every ISA equals the scalar definition bitwise (integer sums are
// exact and the float steps are the same operations in the same order). (2) The definition is within a
// derived bound of the exact product sum_k w_k x_k of the dequantized weights:
//   activation rounding: per block b of the activation (scale d_b = fl(max|x| / 32639), integers
//       |q_k| <= 32639), |x_k - d_b q_k| <= d_b (1/2 + 3·32639 u) (the rounded half-step plus the
//       roundings of 32639/max, of x·(32639/max) and of max/32639, each relative u on a value
//       <= 32639 d_b), so the products move by at most  E_q = sum_b d_b (1/2 + 3·32639 u) sum_{k in b} |w_k|;
//   float steps on x̂_k = d_b q_k: the block terms (one rounded scale product, a possibly rounded
//       int -> float conversion, one fma per term, at most 2 terms per block) add up like a sum of
//       n = 2·n_blocks + 3 rounded terms: <= gamma_n · sum_k (|w_k| + 2|m_k|) |x̂_k|, where m_k is the
//       weight's minimum part (counted in both terms); the weights implied by the integer path differ
//       from dequantize_row's by the latter's own roundings (<= 3u |w_k|).
void check_int8_path(Isa isa, TensorType type) {
    const int64_t rows = 45;
    const int64_t block = tensor_type_traits(type).block_size;
    for (int64_t cols : {test_cols(type), 8 * block}) {
        const std::vector<uint8_t> W = random_weights(type, rows, cols, 1234 + static_cast<uint32_t>(cols));
        for (int64_t n_tokens : {1, 2, 3, 5, 13}) {
            std::vector<float> X = random_activations(n_tokens * cols, 99 + static_cast<uint32_t>(n_tokens));
            // Edge rows: an all-zero token and a token with one huge value per block.
            if (n_tokens == 13) {
                std::fill(X.begin(), X.begin() + cols, 0.0f);
                for (int64_t k = 0; k < cols; k += 32) X[static_cast<size_t>(cols + k)] = 1e6f;
            }
            std::vector<float> got(static_cast<size_t>(n_tokens * rows)), want(got.size());
            matmul_integer_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, got.data(), nullptr);
            matmul_integer_with(Isa::scalar, type, W.data(), rows, cols, X.data(), n_tokens, want.data(), nullptr);
            if (matmul_uses_integer_activations(isa, type)) {  // matmul() takes this path here
                std::vector<float> dispatched(got.size());
                matmul_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, dispatched.data(), nullptr);
                ASSERT_EQ(0, std::memcmp(dispatched.data(), got.data(), 4 * got.size()));
            }
            for (size_t i = 0; i < got.size(); ++i) {
                ASSERT_TRUE(same_bits(got[i], want[i]))
                    << "cols " << cols << " tokens " << n_tokens << " token " << i / rows << " row " << i % rows << ": "
                    << got[i] << " vs scalar " << want[i];
            }
            if (isa != Isa::scalar) continue;
            const int64_t ablock = kernels::activation_block(type);
            std::vector<int8_t> qh(static_cast<size_t>(cols)), ql(static_cast<size_t>(cols));
            std::vector<float> dx(static_cast<size_t>(cols / ablock));
            std::vector<int32_t> h32(static_cast<size_t>(cols / 32)), l32(h32.size());
            std::vector<int32_t> h16(static_cast<size_t>(cols / 16)), l16(h16.size());
            std::vector<double> q(static_cast<size_t>(cols));
            std::vector<float> w(static_cast<size_t>(cols));
            const double u = std::ldexp(1.0, -24);
            const double n = static_cast<double>(2 * (cols / block) + 3);
            const double gamma = n * u / (1 - n * u);
            const double half_step = 0.5 + 3 * kernels::kActivationMax * u;
            for (int64_t t = 0; t < n_tokens; ++t) {
                const float* x = X.data() + t * cols;
                kernels::reference::quantize_activation_row(x, cols, ablock, qh.data(), ql.data(), dx.data(),
                                                            h32.data(), l32.data(), h16.data(), l16.data());
                for (int64_t k = 0; k < cols; ++k) {
                    const auto kk = static_cast<size_t>(k);
                    q[kk] = 256.0 * qh[kk] + ql[kk];
                    ASSERT_LE(std::abs(q[kk]), kernels::kActivationMax);
                    const double d = dx[static_cast<size_t>(k / ablock)];
                    ASSERT_LE(std::abs(double(x[k]) - d * q[kk]), d * half_step) << k;
                }
                for (int64_t r = 0; r < rows; ++r) {
                    const uint8_t* row = W.data() + r * tensor_row_bytes(type, cols);
                    dequantize_row(type, row, w.data(), cols);
                    const std::vector<double> m = min_parts(type, row, cols);
                    double exact = 0, e_q = 0, abs_terms = 0, abs_wx = 0;
                    for (int64_t k = 0; k < cols; ++k) {
                        const auto kk = static_cast<size_t>(k);
                        const double d = dx[static_cast<size_t>(k / ablock)];
                        const double xhat = d * q[kk];
                        exact += double(w[kk]) * double(x[k]);
                        e_q += d * half_step * std::abs(double(w[kk]));
                        abs_terms += (std::abs(double(w[kk])) + 2 * std::abs(m[kk])) * std::abs(xhat);
                        abs_wx += std::abs(double(w[kk]) * xhat);
                    }
                    const double tol = e_q + gamma * abs_terms + 3 * u * abs_wx + cols * 1e-44;
                    const double err = std::abs(double(want[static_cast<size_t>(t * rows + r)]) - exact);
                    ASSERT_LE(err, tol) << "cols " << cols << " token " << t << " row " << r;
                }
            }
        }
    }
}

TEST_P(MatmulCase, MatchesReferenceWithinDerivedBound) {
    const auto [isa, type] = GetParam();
    if (!matmul_uses_integer_activations(isa, type)) check_f32_path(isa, type);
    if (kernels::has_integer_path(type)) check_int8_path(isa, type);
}

// With one-hot activations the output is the decoded weight itself, so this checks that each kernel's
// decoder reproduces dequantize_row: bitwise on the f32 path (only a zero's sign could differ, and ==
// ignores it). On the integer path a one-hot row is quantized exactly (q = 32639, d = fl(1/32639)), so
// the output is the weight up to the definition's few roundings (the scale products d·dx, dmin·dx, the
// fma of each term, dx·32639 ≠ 1 by an ulp): within 8u of the weight's two parts (value and minimum).
TEST_P(MatmulCase, OneHotActivationsReturnTheDequantizedWeights) {
    const auto [isa, type] = GetParam();
    const bool integer = matmul_uses_integer_activations(isa, type);
    const int64_t rows = 9, cols = tensor_type_traits(type).block_size == 256 ? 256 : 64;
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 77);
    std::vector<float> X(static_cast<size_t>(cols * cols), 0.0f);
    for (int64_t k = 0; k < cols; ++k) X[static_cast<size_t>(k * cols + k)] = 1.0f;
    std::vector<float> Y(static_cast<size_t>(cols * rows));
    matmul_with(isa, type, W.data(), rows, cols, X.data(), cols, Y.data(), nullptr);
    std::vector<float> w(static_cast<size_t>(cols));
    const double u = std::ldexp(1.0, -24);
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = W.data() + r * tensor_row_bytes(type, cols);
        dequantize_row(type, row, w.data(), cols);
        const std::vector<double> m = min_parts(type, row, cols);
        for (int64_t k = 0; k < cols; ++k) {
            const float y = Y[static_cast<size_t>(k * rows + r)];
            const float want = w[static_cast<size_t>(k)];
            if (!integer) {
                ASSERT_EQ(y, want) << "row " << r << " col " << k;
            } else {
                const double tol = 8 * u * (std::abs(double(want)) + 2 * std::abs(m[static_cast<size_t>(k)])) + 1e-44;
                ASSERT_LE(std::abs(double(y) - double(want)), tol)
                    << "row " << r << " col " << k << ": " << y << " vs " << want;
            }
        }
    }
}

// The integer sums at their largest: every quant bit set (largest weights, 6-bit scales and mins 63;
// q6_K scales -128 or 127), activations of one magnitude (|q| = 32639 everywhere: h = l = 127, or the
// negative split h = -127, l = -127) with every sign pattern that keeps the sums extreme or makes the
// two planes disagree. The kernels' int32 steps are only exact within bounds that these inputs reach
// (K-quant super-block sums pass 2^32), so this pins the bounds reasoning, bitwise against the scalar
// definition, for the decode (1, 2 tokens), few-token (3 .. 16) and batched paths and partial row tiles.
TEST_P(MatmulCase, ExtremeIntegerSumsBitwise) {
    const auto [isa, type] = GetParam();
    if (!kernels::has_integer_path(type)) return;
    const int64_t rows = 21, cols = 512;  // partial row tiles; two K-quant super-blocks
    const uint64_t row_bytes = tensor_row_bytes(type, cols);
    const uint32_t block_bytes = tensor_type_traits(type).type_size;
    std::vector<uint8_t> W(row_bytes * rows, 0xFF);
    for (uint64_t off = 0; off < W.size(); off += block_bytes) {
        uint8_t* blk = W.data() + off;
        const int row = static_cast<int>(off / row_bytes);
        switch (type) {
            case TensorType::Q4_K:
            case TensorType::Q5_K:
                put_fp16(blk, 0.001f);
                put_fp16(blk + 2, 0.003f);
                break;
            case TensorType::Q6_K:
                std::memset(blk + 192, row % 2 ? 0x80 : 0x7F, 16);
                put_fp16(blk + 208, 0.001f);
                break;
            case TensorType::Q4_1:
                put_fp16(blk, 0.001f);
                put_fp16(blk + 2, -0.003f);
                break;
            default: put_fp16(blk, 0.001f); break;
        }
    }
    for (int pattern = 0; pattern < 4; ++pattern) {
        for (int64_t n_tokens : {1, 2, 3, 4, 7, 16}) {
            std::vector<float> X(static_cast<size_t>(n_tokens * cols));
            for (size_t i = 0; i < X.size(); ++i) {
                const bool negative =
                    pattern == 1 || (pattern == 2 && i % 2) || (pattern == 3 && (i / 4 + i / 256) % 2);
                X[i] = negative ? -1.0f : 1.0f;
            }
            std::vector<float> got(static_cast<size_t>(n_tokens * rows)), want(got.size());
            matmul_integer_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, got.data(), nullptr);
            matmul_integer_with(Isa::scalar, type, W.data(), rows, cols, X.data(), n_tokens, want.data(), nullptr);
            for (size_t i = 0; i < got.size(); ++i) {
                ASSERT_TRUE(same_bits(got[i], want[i]))
                    << "pattern " << pattern << " tokens " << n_tokens << " token " << i / rows << " row " << i % rows
                    << ": " << got[i] << " vs " << want[i];
            }
        }
    }
}

// Y[t][r] depends only on (W[r], X[t]): compare the full product against per-token dot_row, against
// X split into chunks of odd sizes, against sub-ranges of rows, and across thread counts. Bitwise.
TEST_P(MatmulCase, BatchInvariantBitwise) {
    const auto [isa, type] = GetParam();
    const int64_t rows = 37, cols = test_cols(type), n_tokens = 70;  // odd rows; tokens span 2 token blocks
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 555);
    const std::vector<float> X = random_activations(n_tokens * cols, 556);
    const uint64_t row_bytes = tensor_row_bytes(type, cols);
    std::vector<float> full(static_cast<size_t>(n_tokens * rows));
    matmul_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, full.data(), nullptr);

    auto expect_equal = [&](const std::vector<float>& other, const char* what) {
        for (size_t i = 0; i < full.size(); ++i) {
            ASSERT_TRUE(same_bits(full[i], other[i]))
                << what << ": token " << i / rows << " row " << i % rows << ": " << full[i] << " vs " << other[i];
        }
    };

    std::vector<float> single(full.size());
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < rows; ++r)
            single[static_cast<size_t>(t * rows + r)] =
                dot_row_with(isa, type, W.data() + r * row_bytes, X.data() + t * cols, cols);
    expect_equal(single, "dot_row per token");

    for (const std::vector<int64_t>& sizes : std::vector<std::vector<int64_t>>{{1}, {3, 5, 1, 7}, {2}, {69, 1}, {4}}) {
        std::vector<float> chunked(full.size());
        int64_t t = 0;
        for (size_t i = 0; t < n_tokens; ++i) {
            const int64_t n = std::min(sizes[i % sizes.size()], n_tokens - t);
            std::vector<float> y(static_cast<size_t>(n * rows));
            matmul_with(isa, type, W.data(), rows, cols, X.data() + t * cols, n, y.data(), nullptr);
            std::copy(y.begin(), y.end(), chunked.begin() + t * rows);
            t += n;
        }
        expect_equal(chunked, ("chunks starting " + std::to_string(sizes[0])).c_str());
    }

    // Row sub-ranges land in different tile positions (offsets 1, 10, 21 are not multiples of the tile).
    std::vector<float> by_rows(full.size());
    for (int64_t r0 : {0, 1, 4, 10, 21, 26}) {  // covers all 37 rows
        const int64_t r1 = std::min(rows, r0 + 11);
        const int64_t nr = r1 - r0;
        std::vector<float> y(static_cast<size_t>(n_tokens * nr));
        matmul_with(isa, type, W.data() + r0 * row_bytes, nr, cols, X.data(), n_tokens, y.data(), nullptr);
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t r = r0; r < r1; ++r)
                by_rows[static_cast<size_t>(t * rows + r)] = y[static_cast<size_t>(t * nr + r - r0)];
    }
    expect_equal(by_rows, "row sub-ranges");

    for (int n_threads : {1, 2, 3}) {
        ThreadPool pool(n_threads);
        std::vector<float> threaded(full.size());
        matmul_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, threaded.data(), &pool);
        expect_equal(threaded, ("threads " + std::to_string(n_threads)).c_str());
        // Many rows, so that the pool really splits them, compared with the single-threaded result.
        const int64_t big_rows = 301;
        const std::vector<uint8_t> W2 = random_weights(type, big_rows, cols, 9);
        std::vector<float> a(static_cast<size_t>(3 * big_rows)), b(a.size());
        matmul_with(isa, type, W2.data(), big_rows, cols, X.data(), 3, a.data(), nullptr);
        matmul_with(isa, type, W2.data(), big_rows, cols, X.data(), 3, b.data(), &pool);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), 4 * a.size())) << n_threads << " threads, " << big_rows << " rows";
    }
}

INSTANTIATE_TEST_SUITE_P(AllIsasAndTypes, MatmulCase, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace kvstash
