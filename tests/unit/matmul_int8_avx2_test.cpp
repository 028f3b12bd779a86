// The AVX2 integer-activation kernels (backends/cpu/matmul/matmul_int8_avx2.cpp) against the scalar definition
// (reference::matmul_int8_rows_scalar), bitwise, over shapes that cross their tile edges: rows around
// the 8- and 16-row tiles, 1..17 tokens (the few-token kernel, the 3-token register tiles and
// their remainders), one to many blocks; and batch invariance: a (row, token) output is the same bits alone,
// in any row range, in any batch of tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/runtime/dispatch.h"
#include "format/tensor_type.h"
#include "support/random_operands.h"

namespace kvstash {
namespace {

using test::random_activations;
using test::random_weights;

// Y (n_tokens × rows) from one rows kernel over rows [row_begin, row_end) of W (the others stay NaN).
// prefetch_row_end: MatmulArgs::prefetch_row_end (prefetching past row_end, never computing there).
std::vector<float> run_rows(kernels::MatmulRowsFn fn, TensorType type, const std::vector<uint8_t>& W, int64_t rows,
                            int64_t cols, const float* X, int64_t n_tokens, int64_t row_begin, int64_t row_end,
                            int64_t prefetch_row_end = 0) {
    kernels::QuantizedActivations xq;
    kernels::quantize_activations(X, n_tokens, cols, kernels::activation_block(type), xq, nullptr);
    std::vector<float> Y(static_cast<size_t>(n_tokens * rows), std::nanf(""));
    const kernels::MatmulArgs args{
        type, W.data(), tensor_row_bytes(type, cols), cols, X, n_tokens, Y.data(), rows, &xq, prefetch_row_end};
    fn(args, row_begin, row_end);
    return Y;
}

std::string where(int64_t rows, int64_t cols, int64_t n_tokens, size_t i) {
    return "rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " tokens " + std::to_string(n_tokens) +
           ": token " + std::to_string(static_cast<int64_t>(i) / rows) + " row " +
           std::to_string(static_cast<int64_t>(i) % rows);
}

class MatmulInt8Avx2 : public ::testing::TestWithParam<TensorType> {
protected:
    void SetUp() override {
        if (!cpu_supports(Isa::avx2)) GTEST_SKIP() << "this CPU has no AVX2";
    }
};
// The tests of the 32-element block types' own kernels (q8_0, q4_0, q4_1; the K-quants': matmul_int8_kquant_avx2_test).
class MatmulInt8Avx2Blocks32 : public MatmulInt8Avx2 {};

TEST_P(MatmulInt8Avx2, EqualsScalarDefinitionAcrossTileEdges) {
    const TensorType type = GetParam();
    const int64_t block = tensor_type_traits(type).block_size;
    const kernels::MatmulRowsFn avx2 = kernels::kernel_table(Isa::avx2).matmul_int8_rows;
    for (int64_t rows : {1, 7, 8, 9, 16, 17, 23}) {
        for (int64_t cols : {block, 3 * block, 8 * block}) {
            const std::vector<uint8_t> W =
                random_weights(type, rows, cols, 77 + static_cast<uint32_t>(rows * 1000 + cols));
            for (int64_t n_tokens = 1; n_tokens <= 17; ++n_tokens) {
                std::vector<float> X = random_activations(n_tokens * cols, 5 + static_cast<uint32_t>(n_tokens));
                if (n_tokens == 13) {  // a huge value per block: activations at |q| = 32639
                    for (int64_t k = 0; k < cols; k += 32) X[static_cast<size_t>(cols + k)] = -1e6f;
                }
                const std::vector<float> want = run_rows(kernels::reference::matmul_int8_rows_scalar, type, W, rows,
                                                         cols, X.data(), n_tokens, 0, rows);
                const std::vector<float> got = run_rows(avx2, type, W, rows, cols, X.data(), n_tokens, 0, rows);
                for (size_t i = 0; i < got.size(); ++i) {
                    ASSERT_EQ(0, std::memcmp(&got[i], &want[i], 4))
                        << where(rows, cols, n_tokens, i) << ": " << got[i] << " vs scalar " << want[i];
                }
            }
        }
    }
}

// Weights at their extremes (q8_0: -128 and 127 everywhere; q4_0 / q4_1: nibbles 0 and 15) with activations at
// +-32639: the exact int32 sums at their largest (q4_0: with the offset 8 subtracted from the raw nibbles' sum).
TEST_P(MatmulInt8Avx2Blocks32, EqualsScalarDefinitionAtExtremeIntegers) {
    const TensorType type = GetParam();
    const int64_t rows = 11, cols = 96;
    const kernels::MatmulRowsFn avx2 = kernels::kernel_table(Isa::avx2).matmul_int8_rows;
    std::vector<uint8_t> W = random_weights(type, rows, cols, 9);
    const size_t bytes = tensor_type_traits(type).type_size;
    const size_t ints = type == TensorType::Q8_0 ? 32 : 16;  // the block's last bytes: its integers
    for (size_t off = 0, b = 0; off < W.size(); off += bytes, ++b) {
        const int low = type == TensorType::Q8_0 ? 0x80 : 0x00, high = type == TensorType::Q8_0 ? 0x7F : 0xFF;
        std::memset(W.data() + off + bytes - ints, b % 2 ? low : high, ints);
    }
    for (int64_t n_tokens : {1, 2, 3, 7}) {
        std::vector<float> X(static_cast<size_t>(n_tokens * cols));
        for (size_t i = 0; i < X.size(); ++i) X[i] = (i / 5) % 2 ? -1.0f : 1.0f;
        const std::vector<float> want =
            run_rows(kernels::reference::matmul_int8_rows_scalar, type, W, rows, cols, X.data(), n_tokens, 0, rows);
        const std::vector<float> got = run_rows(avx2, type, W, rows, cols, X.data(), n_tokens, 0, rows);
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(0, std::memcmp(&got[i], &want[i], 4)) << where(rows, cols, n_tokens, i);
        }
    }
}

// Each (row, token) output alone (one row, one token) equals the same output of the full product, and
// of a product over a row range that starts mid-tile.
TEST_P(MatmulInt8Avx2, BatchInvariant) {
    const TensorType type = GetParam();
    const int64_t block = tensor_type_traits(type).block_size;
    const int64_t rows = 21, cols = 4 * block, n_tokens = 15;
    const kernels::MatmulRowsFn avx2 = kernels::kernel_table(Isa::avx2).matmul_int8_rows;
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 4242);
    const std::vector<float> X = random_activations(n_tokens * cols, 4343);
    const std::vector<float> full = run_rows(avx2, type, W, rows, cols, X.data(), n_tokens, 0, rows);
    const std::vector<float> part = run_rows(avx2, type, W, rows, cols, X.data(), n_tokens, 3, 17);
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 3; r < 17; ++r) {
            const size_t i = static_cast<size_t>(t * rows + r);
            ASSERT_EQ(0, std::memcmp(&full[i], &part[i], 4)) << "rows 3..17, " << where(rows, cols, n_tokens, i);
        }
    }
    for (int64_t t = 0; t < n_tokens; t += 4) {
        const float* x = X.data() + t * cols;
        for (int64_t r = 0; r < rows; r += 5) {
            const std::vector<float> one = run_rows(avx2, type, W, rows, cols, x, 1, r, r + 1);
            const size_t i = static_cast<size_t>(t * rows + r);
            ASSERT_EQ(0, std::memcmp(&full[i], &one[static_cast<size_t>(r)], 4))
                << "alone, " << where(rows, cols, n_tokens, i);
        }
        // The same token in a 3-token batch (the few-token kernel: up to 6 tokens) as in the full one.
        if (t + 3 <= n_tokens) {
            const std::vector<float> three = run_rows(avx2, type, W, rows, cols, x, 3, 0, rows);
            for (size_t i = 0; i < three.size(); ++i) {
                ASSERT_EQ(0, std::memcmp(&full[static_cast<size_t>(t * rows) + i], &three[i], 4))
                    << "3 tokens from " << t << ", " << where(rows, cols, 3, i);
            }
        }
    }
}

// The few-token kernel of the 32-element types at Gemma 3's width (640 columns: 20 blocks, 680-byte q8_0 rows)
// over row ranges that start and end mid-tile: full 8-row tiles (strided rows, prefetching tiles ahead, clamped
// at the range's end) and the tail tile, against the scalar definition over the same range, 1..6 tokens.
TEST_P(MatmulInt8Avx2Blocks32, FewTokensOverRowRangesAtGemmaWidth) {
    const TensorType type = GetParam();
    const int64_t rows = 77, cols = 640;
    const kernels::MatmulRowsFn avx2 = kernels::kernel_table(Isa::avx2).matmul_int8_rows;
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 640);
    for (int64_t n_tokens = 1; n_tokens <= 6; ++n_tokens) {
        const std::vector<float> X = random_activations(n_tokens * cols, 641 + static_cast<uint32_t>(n_tokens));
        for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 77}, {3, 77}, {5, 44}, {9, 10}, {1, 17}}) {
            const std::vector<float> want = run_rows(kernels::reference::matmul_int8_rows_scalar, type, W, rows, cols,
                                                     X.data(), n_tokens, begin, end);
            const std::vector<float> got = run_rows(avx2, type, W, rows, cols, X.data(), n_tokens, begin, end);
            for (int64_t t = 0; t < n_tokens; ++t) {
                for (int64_t r = begin; r < end; ++r) {
                    const size_t i = static_cast<size_t>(t * rows + r);
                    ASSERT_EQ(0, std::memcmp(&got[i], &want[i], 4))
                        << "rows " << begin << ".." << end << ", " << where(rows, cols, n_tokens, i);
                }
            }
        }
    }
}

// Decode's shares (backends/cpu/matmul/matmul.cpp) let a kernel prefetch past its row range, up to the rows its thread
// reads next: the outputs of the range are the same bits and nothing outside the range is written.
TEST_P(MatmulInt8Avx2, PrefetchPastTheRangeChangesNothing) {
    const TensorType type = GetParam();
    const int64_t rows = 205, cols = tensor_type_traits(type).block_size == 256 ? 1024 : 640;
    const kernels::MatmulRowsFn avx2 = kernels::kernel_table(Isa::avx2).matmul_int8_rows;
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 900);
    for (int64_t n_tokens : {1, 2, 6}) {
        const std::vector<float> X = random_activations(n_tokens * cols, 901 + static_cast<uint32_t>(n_tokens));
        for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 48}, {48, 96}, {3, 77}, {160, 205}}) {
            const std::vector<float> plain = run_rows(avx2, type, W, rows, cols, X.data(), n_tokens, begin, end);
            for (int64_t prefetch_end : {end, end + 1, rows}) {
                const std::vector<float> got =
                    run_rows(avx2, type, W, rows, cols, X.data(), n_tokens, begin, end, prefetch_end);
                for (size_t i = 0; i < got.size(); ++i) {
                    const int64_t r = static_cast<int64_t>(i) % rows;
                    if (r < begin || r >= end) {
                        ASSERT_TRUE(std::isnan(got[i]))
                            << "written outside the range: " << where(rows, cols, n_tokens, i);
                    } else {
                        ASSERT_EQ(0, std::memcmp(&got[i], &plain[i], 4))
                            << "prefetch to row " << prefetch_end << ", " << where(rows, cols, n_tokens, i);
                    }
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulInt8Avx2,
                         ::testing::Values(TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1, TensorType::Q4_K,
                                           TensorType::Q5_K, TensorType::Q6_K),
                         [](const ::testing::TestParamInfo<TensorType>& info) {
                             return std::string(tensor_type_traits(info.param).name);
                         });
INSTANTIATE_TEST_SUITE_P(Types, MatmulInt8Avx2Blocks32,
                         ::testing::Values(TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1),
                         [](const ::testing::TestParamInfo<TensorType>& info) {
                             return std::string(tensor_type_traits(info.param).name);
                         });

}  // namespace
}  // namespace kvstash
