// matmul: every weight type on every ISA this CPU has, against reference::matmul; batch invariance
// (bitwise) across n_tokens, chunking, row ranges and thread counts; argument checks; ISA dispatch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/tensor_type.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
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

// Accuracy against the scalar reference. Both compute sum_k w_k * x_k over the same exactly decoded
// w_k (dequantize_row; the kernels decode with the same fp32 operations), in different orders (fma,
// 8/16 lanes, tree sum). For any order, the fp32 result s satisfies the classic bound
//     |s - exact| <= gamma_n * sum_k |w_k x_k|,   gamma_n = n u / (1 - n u),  u = 2^-24,
// with n = cols + 1 (cols - 1 additions, one rounded product, margin). So two such results differ by at
// most 2 gamma_n sum |w_k x_k|. A tiny absolute term covers underflow of subnormal products.
TEST_P(MatmulCase, MatchesReferenceWithinRoundingBound) {
    const auto [isa, type] = GetParam();
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

// With one-hot activations the output is the decoded weight itself, so this checks that each kernel's
// decoder reproduces dequantize_row bitwise (only a zero's sign could differ, and == ignores it).
TEST_P(MatmulCase, OneHotActivationsReturnTheDequantizedWeights) {
    const auto [isa, type] = GetParam();
    const int64_t rows = 9, cols = tensor_type_traits(type).block_size == 256 ? 256 : 64;
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 77);
    std::vector<float> X(static_cast<size_t>(cols * cols), 0.0f);
    for (int64_t k = 0; k < cols; ++k) X[static_cast<size_t>(k * cols + k)] = 1.0f;
    std::vector<float> Y(static_cast<size_t>(cols * rows));
    matmul_with(isa, type, W.data(), rows, cols, X.data(), cols, Y.data(), nullptr);
    std::vector<float> w(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(type, W.data() + r * tensor_row_bytes(type, cols), w.data(), cols);
        for (int64_t k = 0; k < cols; ++k) {
            ASSERT_EQ(Y[static_cast<size_t>(k * rows + r)], w[static_cast<size_t>(k)]) << "row " << r << " col " << k;
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
            for (int64_t r = r0; r < r1; ++r) by_rows[static_cast<size_t>(t * rows + r)] = y[static_cast<size_t>(t * nr + r - r0)];
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
