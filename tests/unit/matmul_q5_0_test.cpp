// q5_0 on the integer-activation path (backends/cpu/matmul/matmul_int8_dot.h,
// backends/cpu/matmul/matmul_int8_avx2.cpp): the scalar definition gives, bitwise, what the q8_0 definition gives on
// the losslessly repacked matrix (same fp16 d, int8 q - 16), so keeping q5_0 as stored (model/weights.cpp) changes no
// logit; the AVX2 kernels give the scalar definition's bits over rows × tokens × blocks across their tile edges, at the
// extreme integers, and batch-invariantly; matmul() computes q5_0 on every path (integer activations).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "support/random_operands.h"

namespace kvstash {
namespace {

using test::random_activations;

constexpr int64_t kQ5Bytes = 22, kQ8Bytes = 34;

// rows × cols q5_0: random nibbles and fifth bits, fp16 scales of either sign around 0.01.
std::vector<uint8_t> random_q5_0(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> W(static_cast<size_t>(rows * (cols / 32) * kQ5Bytes));
    for (uint8_t& b : W) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(0.002f, 0.02f);
    for (size_t off = 0; off < W.size(); off += kQ5Bytes) {
        const uint16_t d = fp32_to_fp16((rng() % 2 ? -1.0f : 1.0f) * scale(rng));
        std::memcpy(W.data() + off, &d, 2);
    }
    return W;
}

// The q8_0 blocks of the same values: d, then q - 16 as int8 (element j: nibble j of the low halves for j < 16).
std::vector<uint8_t> repack_as_q8_0(const std::vector<uint8_t>& W5) {
    const size_t blocks = W5.size() / kQ5Bytes;
    std::vector<uint8_t> W8(blocks * kQ8Bytes);
    for (size_t b = 0; b < blocks; ++b) {
        const uint8_t* src = W5.data() + b * kQ5Bytes;
        uint8_t* dst = W8.data() + b * kQ8Bytes;
        std::memcpy(dst, src, 2);
        uint32_t qh;
        std::memcpy(&qh, src + 2, 4);
        for (int j = 0; j < 16; ++j) {
            dst[2 + j] = static_cast<uint8_t>(((src[6 + j] & 0x0F) | (((qh >> j) & 1u) << 4)) - 16);
            dst[18 + j] = static_cast<uint8_t>(((src[6 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16);
        }
    }
    return W8;
}

// Y (n_tokens × rows) from one rows kernel over rows [row_begin, row_end) of W (the others stay NaN).
std::vector<float> run_rows(kernels::MatmulRowsFn fn, TensorType type, const std::vector<uint8_t>& W, int64_t rows,
                            int64_t cols, const float* X, int64_t n_tokens, int64_t row_begin, int64_t row_end) {
    kernels::QuantizedActivations xq;
    kernels::quantize_activations(X, n_tokens, cols, 32, xq, nullptr);
    std::vector<float> Y(static_cast<size_t>(n_tokens * rows), std::nanf(""));
    const kernels::MatmulArgs args{type, W.data(), tensor_row_bytes(type, cols), cols, X, n_tokens, Y.data(),
                                   rows, &xq};
    fn(args, row_begin, row_end);
    return Y;
}

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(0, std::memcmp(&got[i], &want[i], 4))
            << what << ", output " << i << ": " << got[i] << " vs " << want[i];
    }
}

std::string shape(int64_t rows, int64_t cols, int64_t n_tokens) {
    return "rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " tokens " + std::to_string(n_tokens);
}

TEST(MatmulQ5_0, ScalarDefinitionEqualsRepackedQ8_0) {
    const kernels::MatmulRowsFn scalar = kernels::reference::matmul_int8_rows_scalar;
    for (int64_t cols : {32, 96, 640}) {
        const int64_t rows = 13;
        const std::vector<uint8_t> W5 = random_q5_0(rows, cols, 11 + static_cast<uint32_t>(cols));
        const std::vector<uint8_t> W8 = repack_as_q8_0(W5);
        for (int64_t n_tokens : {1, 4, 9}) {
            const std::vector<float> X = random_activations(n_tokens * cols, 7 + static_cast<uint32_t>(n_tokens));
            expect_bitwise(run_rows(scalar, kTensorTypeQ5_0, W5, rows, cols, X.data(), n_tokens, 0, rows),
                           run_rows(scalar, TensorType::Q8_0, W8, rows, cols, X.data(), n_tokens, 0, rows),
                           shape(rows, cols, n_tokens));
        }
    }
}

class MatmulQ5_0Avx2 : public ::testing::Test {
protected:
    void SetUp() override {
        if (!cpu_supports(Isa::avx2)) GTEST_SKIP() << "this CPU has no AVX2";
    }
    const kernels::MatmulRowsFn avx2 = kernels::kernel_table(Isa::avx2).matmul_int8_rows;
};

// Rows around the 8- and 16-row tiles, 1..17 tokens (the few-token kernel up to 6, then the 3-token
// register tiles and their remainders), one to many blocks.
TEST_F(MatmulQ5_0Avx2, EqualsScalarDefinitionAcrossTileEdges) {
    for (int64_t rows : {1, 7, 8, 9, 16, 17, 23}) {
        for (int64_t cols : {32, 96, 256}) {
            const std::vector<uint8_t> W = random_q5_0(rows, cols, 77 + static_cast<uint32_t>(rows * 1000 + cols));
            for (int64_t n_tokens = 1; n_tokens <= 17; ++n_tokens) {
                std::vector<float> X = random_activations(n_tokens * cols, 5 + static_cast<uint32_t>(n_tokens));
                if (n_tokens == 13) {  // a huge value per block: activations at |q| = 32639
                    for (int64_t k = 0; k < cols; k += 32) X[static_cast<size_t>(cols + k)] = -1e6f;
                }
                expect_bitwise(run_rows(avx2, kTensorTypeQ5_0, W, rows, cols, X.data(), n_tokens, 0, rows),
                               run_rows(kernels::reference::matmul_int8_rows_scalar, kTensorTypeQ5_0, W, rows, cols,
                                        X.data(), n_tokens, 0, rows),
                               shape(rows, cols, n_tokens));
            }
        }
    }
}

// Every weight at -16 or at 15 (all nibbles and fifth bits clear, or all set) with activations at +-32639:
// the int32 block sums at their largest, and every fifth-bit lane exercised.
TEST_F(MatmulQ5_0Avx2, EqualsScalarDefinitionAtExtremeIntegers) {
    const int64_t rows = 11, cols = 96;
    std::vector<uint8_t> W = random_q5_0(rows, cols, 9);
    for (size_t off = 0; off < W.size(); off += kQ5Bytes) {
        const int kind = static_cast<int>((off / kQ5Bytes) % 3);  // 0: all -16, 1: all 15, 2: alternating bits
        std::memset(W.data() + off + 2, kind == 0 ? 0x00 : kind == 1 ? 0xFF : 0x5A, 20);
    }
    for (int64_t n_tokens : {1, 2, 3, 7}) {
        std::vector<float> X(static_cast<size_t>(n_tokens * cols));
        for (size_t i = 0; i < X.size(); ++i) X[i] = (i / 5) % 2 ? -1.0f : 1.0f;
        expect_bitwise(run_rows(avx2, kTensorTypeQ5_0, W, rows, cols, X.data(), n_tokens, 0, rows),
                       run_rows(kernels::reference::matmul_int8_rows_scalar, kTensorTypeQ5_0, W, rows, cols, X.data(),
                                n_tokens, 0, rows),
                       shape(rows, cols, n_tokens));
    }
}

// Each (row, token) output is the same bits alone, in a row range starting mid-tile, and in a 3-token batch
// (the many-token kernel) as in the 15-token one.
TEST_F(MatmulQ5_0Avx2, BatchInvariant) {
    const int64_t rows = 21, cols = 128, n_tokens = 15;
    const std::vector<uint8_t> W = random_q5_0(rows, cols, 4242);
    const std::vector<float> X = random_activations(n_tokens * cols, 4343);
    const std::vector<float> full = run_rows(avx2, kTensorTypeQ5_0, W, rows, cols, X.data(), n_tokens, 0, rows);
    const std::vector<float> part = run_rows(avx2, kTensorTypeQ5_0, W, rows, cols, X.data(), n_tokens, 3, 17);
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 3; r < 17; ++r) {
            const size_t i = static_cast<size_t>(t * rows + r);
            ASSERT_EQ(0, std::memcmp(&full[i], &part[i], 4)) << "rows 3..17, token " << t << " row " << r;
        }
    }
    for (int64_t t = 0; t + 3 <= n_tokens; t += 4) {
        const float* x = X.data() + t * cols;
        for (int64_t r = 0; r < rows; r += 5) {
            const std::vector<float> one = run_rows(avx2, kTensorTypeQ5_0, W, rows, cols, x, 1, r, r + 1);
            const size_t i = static_cast<size_t>(t * rows + r);
            ASSERT_EQ(0, std::memcmp(&full[i], &one[static_cast<size_t>(r)], 4))
                << "alone: token " << t << " row " << r;
        }
        const std::vector<float> three = run_rows(avx2, kTensorTypeQ5_0, W, rows, cols, x, 3, 0, rows);
        for (size_t i = 0; i < three.size(); ++i) {
            ASSERT_EQ(0, std::memcmp(&full[static_cast<size_t>(t * rows) + i], &three[i], 4))
                << "3 tokens from " << t << ", output " << i;
        }
    }
}

// matmul() on every path (threads, one call per shape) computes q5_0, with the repacked q8_0 matrix's bits
// (so keeping or repacking q5_0 at load, model/weights.cpp, changes no bit) and the scalar path's.
TEST(MatmulQ5_0, MatmulEqualsRepackedQ8_0OnEveryPath) {
    ThreadPool pool(2);
    const int64_t rows = 200, cols = 640;
    const std::vector<uint8_t> W5 = random_q5_0(rows, cols, 31);
    const std::vector<uint8_t> W8 = repack_as_q8_0(W5);
    for (int64_t n_tokens : {1, 5, 33}) {
        const std::vector<float> X = random_activations(n_tokens * cols, 32 + static_cast<uint32_t>(n_tokens));
        std::vector<float> want(static_cast<size_t>(n_tokens * rows));
        matmul_with(Isa::scalar, kTensorTypeQ5_0, W5.data(), rows, cols, X.data(), n_tokens, want.data(), nullptr);
        for (Isa isa : available_isas()) {
            EXPECT_TRUE(matmul_uses_integer_activations(isa, kTensorTypeQ5_0)) << isa_name(isa);
            std::vector<float> y5(want.size()), y8(want.size());
            matmul_with(isa, kTensorTypeQ5_0, W5.data(), rows, cols, X.data(), n_tokens, y5.data(), &pool);
            matmul_with(isa, TensorType::Q8_0, W8.data(), rows, cols, X.data(), n_tokens, y8.data(), &pool);
            expect_bitwise(y5, y8, std::string(isa_name(isa)) + " " + shape(rows, cols, n_tokens));
            expect_bitwise(y5, want, std::string(isa_name(isa)) + " vs scalar " + shape(rows, cols, n_tokens));
        }
    }
}

}  // namespace
}  // namespace kvstash
