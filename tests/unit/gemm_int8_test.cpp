// The prefill GEMM of the integer-activation matmul (backends/cpu/matmul/gemm_int8.h): on every ISA this CPU runs,
// bitwise the scalar definition (reference/matmul_int8_ref.cpp) at 8B-model widths (4096 and 14336 columns, slices
// of the rows) and token counts around its tiles (1, 3, 17, 64, 129: below, inside and across the 4- and 3-token
// steps and the 32-row tiles); batch-invariant: token m of an M-token call is bitwise a 1-token call on that token,
// whatever the thread count and whatever row ranges the rows are cut into.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/tensor_type.h"
#include "support/random_operands.h"

namespace kvstash {
namespace {

using test::random_activations;
using test::random_weights;

class GemmInt8 : public ::testing::TestWithParam<TensorType> {};

std::string type_name(const ::testing::TestParamInfo<TensorType>& info) {
    return tensor_type_name(static_cast<uint32_t>(info.param));
}

// Activations with the edge rows of the integer ranges: token 0 all zeros, token 1 one huge value per block.
std::vector<float> activations(int64_t n_tokens, int64_t cols, uint32_t seed) {
    std::vector<float> X = random_activations(n_tokens * cols, seed);
    if (n_tokens >= 2) {
        std::fill(X.begin(), X.begin() + cols, 0.0f);
        for (int64_t k = 0; k < cols; k += 32) X[static_cast<size_t>(cols + k)] = 1e6f;
    }
    return X;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, int64_t rows,
                      const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(test::same_bits(got[i], want[i]))
            << what << ": token " << i / static_cast<size_t>(rows) << " row " << i % static_cast<size_t>(rows) << ": "
            << got[i] << " vs " << want[i];
    }
}

TEST_P(GemmInt8, EveryIsaEqualsTheScalarDefinitionBitwise) {
    const TensorType type = GetParam();
    struct Shape {
        int64_t rows, cols;
    };
    // 48 rows: a full 32-row tile and a half one; 80 × 1280: a 1,024-column chunk and a short one; 40 × 14336:
    // ffn_down's width (14 chunks), a tile with 8 rows past the end.
    for (const Shape shape : {Shape{48, 4096}, Shape{80, 1280}, Shape{40, 14336}}) {
        const std::vector<uint8_t> W =
            random_weights(type, shape.rows, shape.cols, 7 + static_cast<uint32_t>(shape.cols));
        for (int64_t n_tokens : {1, 3, 17, 64, 129}) {
            const std::vector<float> X = activations(n_tokens, shape.cols, 11 + static_cast<uint32_t>(n_tokens));
            std::vector<float> want(static_cast<size_t>(n_tokens * shape.rows));
            matmul_integer_with(Isa::scalar, type, W.data(), shape.rows, shape.cols, X.data(), n_tokens, want.data(),
                                nullptr);
            for (Isa isa : available_isas()) {
                std::vector<float> got(want.size());
                matmul_integer_with(isa, type, W.data(), shape.rows, shape.cols, X.data(), n_tokens, got.data(),
                                    nullptr);
                expect_same_bits(got, want, shape.rows,
                                 std::string(isa_name(isa)) + " " + std::to_string(shape.rows) + "x" +
                                     std::to_string(shape.cols) + ", " + std::to_string(n_tokens) + " tokens");
            }
        }
    }
}

TEST_P(GemmInt8, TokenOfABatchEqualsItAloneWhateverTheThreads) {
    const TensorType type = GetParam();
    const int64_t rows = 112, cols = 4096, n_tokens = 129;
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 21);
    const std::vector<float> X = activations(n_tokens, cols, 23);
    ThreadPool pool(3);
    for (Isa isa : available_isas()) {
        std::vector<float> batch(static_cast<size_t>(n_tokens * rows));
        matmul_integer_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, batch.data(), &pool);
        std::vector<float> alone(static_cast<size_t>(rows));
        for (int64_t m = 0; m < n_tokens; ++m) {
            matmul_integer_with(isa, type, W.data(), rows, cols, X.data() + m * cols, 1, alone.data(), nullptr);
            ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + m * rows, 4 * static_cast<size_t>(rows)))
                << isa_name(isa) << ": token " << m << " of " << n_tokens;
        }
    }
}

TEST_P(GemmInt8, RowRangesDoNotChangeTheResult) {
    const TensorType type = GetParam();
    const int64_t rows = 112, cols = 2048, n_tokens = 17;
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 31);
    const std::vector<float> X = activations(n_tokens, cols, 33);
    kernels::QuantizedActivations xq;
    kernels::quantize_activations(X.data(), n_tokens, cols, kernels::activation_block(type), xq, nullptr);
    for (Isa isa : available_isas()) {
        const kernels::MatmulRowsFn kernel = kernels::kernel_table(isa).matmul_int8_rows;
        auto run = [&](std::initializer_list<int64_t> cuts) {
            std::vector<float> Y(static_cast<size_t>(n_tokens * rows));
            kernels::MatmulArgs args{type,     W.data(), tensor_row_bytes(type, cols), cols, X.data(), n_tokens,
                                     Y.data(), rows};
            args.xq = &xq;
            const std::vector<int64_t> c(cuts);
            for (size_t i = 0; i + 1 < c.size(); ++i) kernel(args, c[i], c[i + 1]);
            return Y;
        };
        const std::vector<float> whole = run({0, rows});
        // Ranges that put every row in another place of a 32-row tile (and odd starts the dispatcher never makes).
        expect_same_bits(run({0, 16, 48, 96, rows}), whole, rows, std::string(isa_name(isa)) + " 16-row cuts");
        expect_same_bits(run({0, 5, 37, 38, 101, rows}), whole, rows, std::string(isa_name(isa)) + " odd cuts");
    }
}

INSTANTIATE_TEST_SUITE_P(Types, GemmInt8, ::testing::Values(TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K),
                         type_name);

}  // namespace
}  // namespace kvstash
