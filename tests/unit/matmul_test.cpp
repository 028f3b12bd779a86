// matmul: every weight type on every ISA this CPU has, against reference::matmul (f32 weight types) or
// the scalar int8-activation definition (quantized types: bitwise, plus a derived error bound against
// the exact product); batch invariance (bitwise) across n_tokens, chunking, row ranges and thread
// counts; argument checks; ISA dispatch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "format/tensor_type.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "kernels/quantize_act.h"
#include "kernels/thread_pool.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

const TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

void put_fp16(uint8_t* p, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(p, &h, 2);
}

// Random but valid weights: quant bits are random bytes (every pattern is valid); the fp16 scales are
// overwritten with values of a typical magnitude (both signs), so the decoded weights are O(0.1-1).
std::vector<uint8_t> random_weights(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const TensorTypeTraits& traits = tensor_type_traits(type);
    const uint64_t row_bytes = tensor_row_bytes(type, cols);
    std::vector<uint8_t> w(row_bytes * static_cast<uint64_t>(rows));
    if (traits.block_size == 1) {
        for (int64_t i = 0; i < rows * cols; ++i) {
            const float v = normal(rng) * 0.5f;
            if (type == TensorType::F32) {
                std::memcpy(w.data() + 4 * i, &v, 4);
            } else if (type == TensorType::F16) {
                put_fp16(w.data() + 2 * i, v);
            } else {  // bf16: the top half of the fp32 bits
                uint32_t bits;
                std::memcpy(&bits, &v, 4);
                const uint16_t h = static_cast<uint16_t>(bits >> 16);
                std::memcpy(w.data() + 2 * i, &h, 2);
            }
        }
        return w;
    }
    for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
    for (uint64_t off = 0; off < w.size(); off += traits.type_size) {
        uint8_t* blk = w.data() + off;
        switch (type) {
            case TensorType::Q8_0: put_fp16(blk, normal(rng) * 0.01f); break;
            case TensorType::Q4_0: put_fp16(blk, normal(rng) * 0.05f); break;
            case TensorType::Q4_1:
                put_fp16(blk, std::abs(normal(rng)) * 0.05f);
                put_fp16(blk + 2, -std::abs(normal(rng)) * 0.4f);
                break;
            case TensorType::Q4_K:
            case TensorType::Q5_K:
                put_fp16(blk, std::abs(normal(rng)) * 0.002f);
                put_fp16(blk + 2, std::abs(normal(rng)) * 0.004f);
                break;
            case TensorType::Q6_K: put_fp16(blk + 208, normal(rng) * 0.0005f); break;
            default: break;
        }
    }
    return w;
}

std::vector<float> random_activations(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    return x;
}

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
        for (TensorType type : kAllTypes) cases.push_back({isa, type});
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
                kernels::quantize_activation_row(x, cols, ablock, qh.data(), ql.data(), dx.data(), h32.data(),
                                                 l32.data(), h16.data(), l16.data());
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
// definition, for the decode (1, 2 tokens) and batched paths and partial row tiles.
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
        for (int64_t n_tokens : {1, 2, 3}) {
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

// Plain float types accept any column count; a partial last vector is handled (masked) the same way
// for every token count.
TEST(Matmul, OddColumnCountsForFloatTypes) {
    for (Isa isa : available_isas()) {
        for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
            for (int64_t cols : {1, 7, 15, 17, 77}) {
                const int64_t rows = 11, n_tokens = 6;
                const std::vector<uint8_t> W = random_weights(type, rows, cols, 3);
                const std::vector<float> X = random_activations(n_tokens * cols, 4);
                std::vector<float> y(static_cast<size_t>(n_tokens * rows)), ref(y.size());
                matmul_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, y.data(), nullptr);
                reference::matmul(type, W.data(), rows, cols, X.data(), n_tokens, ref.data());
                for (int64_t t = 0; t < n_tokens; ++t) {
                    for (int64_t r = 0; r < rows; ++r) {
                        const size_t i = static_cast<size_t>(t * rows + r);
                        const float one = dot_row_with(isa, type, W.data() + r * tensor_row_bytes(type, cols),
                                                       X.data() + t * cols, cols);
                        ASSERT_TRUE(same_bits(one, y[i])) << isa_name(isa) << " cols " << cols;
                        ASSERT_NEAR(y[i], ref[i], 1e-5 * (1 + std::abs(ref[i])) * cols) << isa_name(isa);
                    }
                }
            }
        }
    }
}

// Long rows: the many-token path runs its register tiles over column slices (accumulators parked
// between slices), the one-token path in one pass; bitwise the same, for every type, partial last
// vector included (odd float column counts), over more than one token block.
TEST(Matmul, LongRowsColumnSlicesBitwise) {
    for (Isa isa : available_isas()) {
        for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_1, TensorType::Q4_K,
                                TensorType::Q6_K}) {
            const bool small_block = tensor_type_traits(type).block_size <= 32;
            for (int64_t cols : {int64_t{1536}, small_block ? int64_t{2080} : int64_t{2560}, int64_t{1101}}) {
                if (cols % tensor_type_traits(type).block_size != 0) continue;
                const int64_t rows = 9, n_tokens = 71;
                const std::vector<uint8_t> W = random_weights(type, rows, cols, 5);
                const std::vector<float> X = random_activations(n_tokens * cols, 6);
                std::vector<float> y(static_cast<size_t>(n_tokens * rows));
                matmul_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, y.data(), nullptr);
                for (int64_t t = 0; t < n_tokens; ++t) {
                    for (int64_t r = 0; r < rows; ++r) {
                        const float one = dot_row_with(isa, type, W.data() + r * tensor_row_bytes(type, cols),
                                                       X.data() + t * cols, cols);
                        ASSERT_TRUE(same_bits(one, y[static_cast<size_t>(t * rows + r)]))
                            << isa_name(isa) << " " << tensor_type_traits(type).name << " cols " << cols << " token "
                            << t << " row " << r;
                    }
                }
            }
        }
    }
}

// matmul_shared_input: each product bitwise what matmul gives it alone, with mixed weight types (integer
// activations of both block sizes and f32 ones on AVX-512 VNNI), with and without a pool, 1 to 70 tokens.
TEST(Matmul, SharedInputEqualsSeparateProductsBitwise) {
    const int64_t cols = 512;
    const std::vector<TensorType> types = {TensorType::Q4_K, TensorType::Q8_0, TensorType::Q6_K, TensorType::F16,
                                           TensorType::Q4_1};
    const std::vector<int64_t> rows = {64, 37, 16, 5, 130};
    std::vector<std::vector<uint8_t>> W;
    for (size_t i = 0; i < types.size(); ++i)
        W.push_back(random_weights(types[i], rows[i], cols, 40 + static_cast<uint32_t>(i)));
    ThreadPool pool(2);
    for (int64_t n_tokens : {1, 2, 3, 70}) {
        const std::vector<float> X = random_activations(n_tokens * cols, 77);
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<std::vector<float>> together(types.size()), alone(types.size());
            std::vector<MatmulOperand> ops;
            for (size_t i = 0; i < types.size(); ++i) {
                together[i].assign(static_cast<size_t>(n_tokens * rows[i]), -1.0f);
                alone[i].assign(together[i].size(), -2.0f);
                ops.push_back({types[i], W[i].data(), rows[i], together[i].data()});
                matmul(types[i], W[i].data(), rows[i], cols, X.data(), n_tokens, alone[i].data(), nullptr);
            }
            matmul_shared_input(ops, cols, X.data(), n_tokens, p);
            for (size_t i = 0; i < types.size(); ++i) {
                EXPECT_EQ(0, std::memcmp(together[i].data(), alone[i].data(), 4 * together[i].size()))
                    << tensor_type_traits(types[i]).name << ", " << n_tokens << " tokens, pool " << (p != nullptr);
            }
        }
    }
}

// The AVX-512 activation quantizer against the scalar one, bitwise, including values the matmul tests
// do not produce: NaN, ±inf, subnormals, -0, huge and tiny magnitudes.
TEST(QuantizeActivations, Avx512EqualsScalarBitwise) {
    const std::vector<Isa> isas = available_isas();
    if (isas.back() != Isa::avx512 || !__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512vbmi")) {
        GTEST_SKIP() << "no AVX-512 VNNI/VBMI on this CPU";
    }
    for (int64_t block : {32, 256}) {
        const int64_t cols = 1024;
        std::vector<float> x = random_activations(cols, 31 + static_cast<uint32_t>(block));
        x[3] = std::numeric_limits<float>::quiet_NaN();
        x[40] = std::numeric_limits<float>::infinity();
        x[300] = -std::numeric_limits<float>::infinity();
        x[70] = 1e-40f;  // subnormal
        x[71] = -0.0f;
        for (int64_t k = 512; k < 512 + block; ++k) x[static_cast<size_t>(k)] = 1e-30f * static_cast<float>(k % 7);
        for (int64_t k = 768; k < 768 + 32; ++k) x[static_cast<size_t>(k)] = 3e37f * static_cast<float>(k % 5 - 2);
        struct Out {
            std::vector<int8_t> h, l;
            std::vector<float> d;
            std::vector<int32_t> h32, l32, h16, l16;
        };
        auto run = [&](kernels::QuantizeRowFn fn) {
            Out o{std::vector<int8_t>(cols),       std::vector<int8_t>(cols),       std::vector<float>(cols / block),
                  std::vector<int32_t>(cols / 32), std::vector<int32_t>(cols / 32), std::vector<int32_t>(cols / 16),
                  std::vector<int32_t>(cols / 16)};
            fn(x.data(), cols, block, o.h.data(), o.l.data(), o.d.data(), o.h32.data(), o.l32.data(), o.h16.data(),
               o.l16.data());
            return o;
        };
        const Out a = run(kernels::quantize_activation_row), b = run(kernels::quantize_activation_row_avx512);
        EXPECT_EQ(a.h, b.h) << block;
        EXPECT_EQ(a.l, b.l) << block;
        EXPECT_EQ(0, std::memcmp(a.d.data(), b.d.data(), 4 * a.d.size())) << block;
        EXPECT_EQ(a.h32, b.h32) << block;
        EXPECT_EQ(a.l32, b.l32) << block;
        EXPECT_EQ(a.h16, b.h16) << block;
        EXPECT_EQ(a.l16, b.l16) << block;
    }
}

TEST(Matmul, IntegerPathOnlyForQuantizedTypes) {
    std::vector<uint8_t> W(4096);
    std::vector<float> X(64), Y(4);
    for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
        EXPECT_THROW(matmul_integer_with(Isa::scalar, type, W.data(), 2, 32, X.data(), 1, Y.data(), nullptr), Error);
    }
}

TEST(Matmul, DispatchedEqualsActiveIsa) {
    const Isa isa = active_isa();
    const TensorType type = TensorType::Q4_1;
    const int64_t rows = 19, cols = 576, n_tokens = 3;
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 5);
    const std::vector<float> X = random_activations(n_tokens * cols, 6);
    std::vector<float> a(static_cast<size_t>(rows * n_tokens)), b(a.size());
    matmul(type, W.data(), rows, cols, X.data(), n_tokens, a.data(), nullptr);
    matmul_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, b.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * a.size()));
    EXPECT_TRUE(same_bits(dot_row(type, W.data(), X.data(), cols), a[0]));
}

TEST(Matmul, RejectsBadArguments) {
    std::vector<uint8_t> W(4096);
    std::vector<float> X(1024), Y(64);
    try {
        matmul(TensorType::Q4_1, W.data(), 2, 40, X.data(), 1, Y.data(), nullptr);
        FAIL() << "40 columns is not a multiple of 32";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    }
    try {
        matmul(static_cast<TensorType>(6), W.data(), 2, 64, X.data(), 1, Y.data(), nullptr);
        FAIL() << "q5_0 is not supported";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::unsupported);
    }
    EXPECT_THROW(matmul(TensorType::F32, W.data(), -1, 4, X.data(), 1, Y.data(), nullptr), Error);
    // Empty products are fine and write nothing.
    Y[0] = 42.0f;
    matmul(TensorType::F32, W.data(), 0, 4, X.data(), 3, Y.data(), nullptr);
    matmul(TensorType::F32, W.data(), 3, 4, X.data(), 0, Y.data(), nullptr);
    EXPECT_EQ(Y[0], 42.0f);
}

TEST(Dispatch, NamesAndAvailability) {
    EXPECT_STREQ(isa_name(Isa::scalar), "scalar");
    EXPECT_STREQ(isa_name(Isa::avx2), "avx2");
    EXPECT_STREQ(isa_name(Isa::avx512), "avx512");
    const std::vector<Isa> isas = available_isas();
    ASSERT_FALSE(isas.empty());
    EXPECT_EQ(isas.front(), Isa::scalar);
}

// Checks active_isa() against KVSTASH_ISA as this process sees it; run directly (unset) and by the
// next test in child processes with the variable set.
TEST(Dispatch, ActiveIsaFollowsEnvironment) {
    const char* forced = std::getenv("KVSTASH_ISA");
    const std::vector<Isa> isas = available_isas();
    if (!forced || !*forced) {
        EXPECT_EQ(active_isa(), isas.back()) << "the best available path is chosen by default";
        return;
    }
    for (Isa isa : isas) {
        if (std::string(forced) == isa_name(isa)) {
            EXPECT_EQ(active_isa(), isa);
            return;
        }
    }
    try {
        active_isa();
        FAIL() << "KVSTASH_ISA=" << forced << " should be refused";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
        EXPECT_NE(std::string(e.what()).find(forced), std::string::npos) << e.what();
    }
    std::vector<float> y(1);
    EXPECT_THROW(matmul(TensorType::F32, y.data(), 1, 1, y.data(), 1, y.data(), nullptr), Error);
}

TEST(Dispatch, ForcedIsaInChildProcesses) {
    if (std::getenv("KVSTASH_ISA")) GTEST_SKIP() << "already a child";
    std::vector<std::string> values = {"scalar", "avx2", "avx512", "sse9"};
    for (const std::string& value : values) {
        // "/proc/self/exe" would name the shell inside system(), so resolve our own path here.
        char self[4096];
        const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
        ASSERT_GT(len, 0);
        self[len] = '\0';
        const std::string run = "KVSTASH_ISA=" + value + " '" + std::string(self) +
                                "' --gtest_filter=Dispatch.ActiveIsaFollowsEnvironment > /dev/null 2>&1";
        EXPECT_EQ(std::system(run.c_str()), 0) << "KVSTASH_ISA=" << value;
    }
}

}  // namespace
}  // namespace kvstash
