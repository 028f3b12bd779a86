// The prefill GEMM of the integer-activation matmul (backends/cpu/matmul/gemm_int8.h): on every ISA this CPU runs,
// bitwise the scalar definition (reference/matmul_int8_ref.cpp) at 8B-model widths (4096 and 14336 columns, slices
// of the rows) and token counts around its tiles (1, 3, 17, 64, 129: below, inside and across the 4- and 3-token
// steps and the 32-row tiles); batch-invariant: token m of an M-token call is bitwise a 1-token call on that token,
// whatever the thread count and whatever row ranges the rows are cut into.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/matmul/gemm_int8.h"
#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/tensor_type.h"
#include "support/matmul_checks.h"
#include "support/random_operands.h"

namespace kvstash {
namespace {

using test::expect_same_bits;
using test::random_weights;

class GemmInt8 : public ::testing::TestWithParam<TensorType> {};

std::string type_name(const ::testing::TestParamInfo<TensorType>& info) {
    return tensor_type_name(static_cast<uint32_t>(info.param));
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
            const std::vector<float> X =
                test::edge_activations(n_tokens, shape.cols, 11 + static_cast<uint32_t>(n_tokens));
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
    const std::vector<float> X = test::edge_activations(n_tokens, cols, 23);
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
    const std::vector<float> X = test::edge_activations(n_tokens, cols, 33);
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

#if KVSTASH_HAVE_X86_KERNELS  // the x86 kernel files are compiled for x86 only
// The kernel of AVX-512 without VNNI (gemm_int8_rows_avx512bw), called directly (this process may run the VNNI one),
// against the scalar definition on the same quantized activations.
std::vector<float> rows_with(kernels::MatmulRowsFn kernel, TensorType type, const std::vector<uint8_t>& W, int64_t rows,
                             int64_t cols, const std::vector<float>& X, const kernels::QuantizedActivations& xq) {
    std::vector<float> Y(static_cast<size_t>(xq.n_tokens * rows));
    kernels::MatmulArgs args{type, W.data(), tensor_row_bytes(type, cols), cols, X.data(), xq.n_tokens, Y.data(), rows};
    args.xq = &xq;
    kernel(args, 0, rows);
    return Y;
}

// The byte ranges of a block that hold its integer weights (not its scales): set to 0xFF, every weight is the
// type's largest unsigned value (nibbles 15, q5_K 31, q6_K 63), the worst case for vpmaddubsw's int16 sums.
void saturate_weights(TensorType type, std::vector<uint8_t>& W) {
    struct Range {
        int begin, end;
    };
    std::vector<Range> ranges;
    switch (type) {
        case TensorType::Q4_0: ranges = {{2, 18}}; break;
        case TensorType::Q4_1: ranges = {{4, 20}}; break;
        case TensorType::Q8_0: ranges = {{2, 34}}; break;
        case TensorType::Q4_K: ranges = {{16, 144}}; break;
        case TensorType::Q5_K: ranges = {{16, 176}}; break;
        case TensorType::Q6_K: ranges = {{0, 192}}; break;
        default: break;
    }
    const uint32_t bytes = tensor_type_traits(type).type_size;
    for (size_t off = 0; off < W.size(); off += bytes) {
        for (const Range r : ranges) std::memset(W.data() + off + r.begin, 0xFF, static_cast<size_t>(r.end - r.begin));
    }
}

class GemmInt8Avx512Bw : public ::testing::TestWithParam<TensorType> {};

TEST_P(GemmInt8Avx512Bw, EqualsTheScalarDefinitionBitwise) {
    if (!cpu_supports(Isa::avx512)) GTEST_SKIP() << "no AVX-512 F/BW/VL/DQ on this CPU";
    const TensorType type = GetParam();
    struct Shape {
        int64_t rows, cols;
    };
    // 48 × 4096: 32- and 16-row tiles, full and partial, 4 column chunks; 21 × 1280: a short chunk, a 5-row tile.
    for (const Shape shape : {Shape{48, 4096}, Shape{21, 1280}}) {
        for (int64_t n_tokens : {1, 8, 9, 17, 64}) {  // the AVX2 kernels up to 8 tokens, the 512-bit tiles above
            const std::vector<float> X =
                test::edge_activations(n_tokens, shape.cols, 41 + static_cast<uint32_t>(n_tokens));
            kernels::QuantizedActivations xq;
            kernels::quantize_activations(X.data(), n_tokens, shape.cols, kernels::activation_block(type), xq, nullptr);
            const std::vector<uint8_t> W = random_weights(type, shape.rows, shape.cols, 43);
            const std::vector<float> want =
                rows_with(kernels::reference::matmul_int8_rows_scalar, type, W, shape.rows, shape.cols, X, xq);
            expect_same_bits(rows_with(kernels::gemm_int8_rows_avx512bw, type, W, shape.rows, shape.cols, X, xq), want,
                             shape.rows, std::to_string(shape.cols) + " cols, " + std::to_string(n_tokens) + " tokens");
        }
    }
}

// The largest weights against the activation bytes of largest magnitude: every block holds one element at +max
// (h = 127, l = 127) and otherwise -max·128/32639 (q = -128: h = 0, l = -128), or all at -max (h = l = -127). A
// vpmaddubsw sum grouped past its bound (int8_dot_avx512.h) saturates here and changes the result.
TEST_P(GemmInt8Avx512Bw, LargestWeightsAndActivationsStayExact) {
    if (!cpu_supports(Isa::avx512)) GTEST_SKIP() << "no AVX-512 F/BW/VL/DQ on this CPU";
    const TensorType type = GetParam();
    const int64_t rows = 40, cols = 1024, n_tokens = 12;
    std::vector<float> X(static_cast<size_t>(n_tokens * cols));
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t k = 0; k < cols; ++k) {
            const bool first = k % 32 == 0;
            float v = t % 2 == 0 ? (first ? 1.0f : -128.0f / 32639.0f) : -1.0f;
            X[static_cast<size_t>(t * cols + k)] = v;
        }
    }
    kernels::QuantizedActivations xq;
    kernels::quantize_activations(X.data(), n_tokens, cols, kernels::activation_block(type), xq, nullptr);
    int l_min = 0;
    for (int8_t l : xq.l) l_min = std::min<int>(l_min, l);
    ASSERT_EQ(l_min, -128) << "the activations should reach the low plane's -128";
    std::vector<uint8_t> W = random_weights(type, rows, cols, 47);
    saturate_weights(type, W);
    const std::vector<float> want = rows_with(kernels::reference::matmul_int8_rows_scalar, type, W, rows, cols, X, xq);
    expect_same_bits(rows_with(kernels::gemm_int8_rows_avx512bw, type, W, rows, cols, X, xq), want, rows,
                     "largest weights");
}

INSTANTIATE_TEST_SUITE_P(Types, GemmInt8Avx512Bw,
                         ::testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0, TensorType::Q4_K,
                                           TensorType::Q5_K, TensorType::Q6_K),
                         type_name);
#endif

INSTANTIATE_TEST_SUITE_P(Types, GemmInt8, ::testing::Values(TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K),
                         type_name);

}  // namespace
}  // namespace kvstash
