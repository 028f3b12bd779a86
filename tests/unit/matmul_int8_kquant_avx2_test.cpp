// The AVX2 K-quant integer kernels (backends/cpu/matmul/matmul_int8_kquant_avx2.cpp) at the bounds their exactness
// argument rests on, bitwise against the scalar definition (reference/matmul_int8_ref.cpp): weights and
// sub-block scales at their largest magnitudes with every activation at +-32639, so each int32 lane reaches
// its proven bound (q6_K: 16 · 4096 · 32639 = 2,139,029,504) and the block sums pass 2^31 (the double
// reduction); and matmul() on AVX2, threaded, over token counts, equals the scalar integer definition (the
// sweep over tile edges and the batch-invariance checks are tests/unit/matmul_int8_avx2_test.cpp's).
#include <gtest/gtest.h>

#include <cmath>
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

std::vector<float> run_rows(kernels::MatmulRowsFn fn, TensorType type, const std::vector<uint8_t>& W, int64_t rows,
                            int64_t cols, const float* X, int64_t n_tokens) {
    kernels::QuantizedActivations xq;
    kernels::quantize_activations(X, n_tokens, cols, 256, xq, nullptr);
    std::vector<float> Y(static_cast<size_t>(n_tokens * rows), std::nanf(""));
    const kernels::MatmulArgs args{type, W.data(), tensor_row_bytes(type, cols), cols, X, n_tokens, Y.data(),
                                   rows, &xq};
    fn(args, 0, rows);
    return Y;
}

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(0, std::memcmp(&got[i], &want[i], 4))
            << what << ", output " << i << ": " << got[i] << " vs " << want[i];
    }
}

// Every block of W set to one extreme: `kind` 0 = the largest negative products (q6_K: wq = -32, sc = -128;
// q4_K / q5_K: wq = 0, scales and mins 63), 1 = the largest positive ones (q6_K: wq = 31, sc = 127; q4_K:
// 15, q5_K: 31, scales and mins 63), 2 = alternating per block.
void set_extreme(TensorType type, std::vector<uint8_t>& W, int kind) {
    const size_t bytes = tensor_type_traits(type).type_size;
    for (size_t off = 0, b = 0; off < W.size(); off += bytes, ++b) {
        uint8_t* blk = W.data() + off;
        const bool high = kind == 1 || (kind == 2 && b % 2 == 1);
        if (type == TensorType::Q6_K) {
            std::memset(blk, high ? 0xFF : 0x00, 192);  // ql, qh: q = 63 or 0, wq = 31 or -32
            std::memset(blk + 192, high ? 0x7F : 0x80, 16);
        } else {
            std::memset(blk + 4, 0xFF, 12);  // every 6-bit scale and min 63
            std::memset(blk + 16, high ? 0xFF : 0x00, bytes - 16);
        }
    }
}

class MatmulInt8KquantAvx2 : public ::testing::TestWithParam<TensorType> {
protected:
    void SetUp() override {
        if (!cpu_supports(Isa::avx2)) GTEST_SKIP() << "this CPU has no AVX2";
    }
};

TEST_P(MatmulInt8KquantAvx2, EqualsScalarDefinitionAtExtremeIntegers) {
    const TensorType type = GetParam();
    const kernels::MatmulRowsFn avx2 = kernels::kernel_table(Isa::avx2).matmul_int8_rows;
    for (int kind = 0; kind < 3; ++kind) {
        for (int64_t rows : {3, 8, 13}) {
            const int64_t cols = 512;
            std::vector<uint8_t> W = random_weights(type, rows, cols, 17 + static_cast<uint32_t>(rows));
            set_extreme(type, W, kind);
            for (int64_t n_tokens : {1, 2, 7}) {
                std::vector<float> X(static_cast<size_t>(n_tokens * cols));
                for (size_t i = 0; i < X.size(); ++i) {  // token 0: all +1 (every |q| = 32639, one sign)
                    const size_t t = i / static_cast<size_t>(cols);
                    X[i] = t == 0 ? 1.0f : t == 1 ? ((i / 3) % 2 ? -1.0f : 1.0f) : -1.0f;
                }
                expect_bitwise(
                    run_rows(avx2, type, W, rows, cols, X.data(), n_tokens),
                    run_rows(kernels::reference::matmul_int8_rows_scalar, type, W, rows, cols, X.data(), n_tokens),
                    "kind " + std::to_string(kind) + " rows " + std::to_string(rows) + " tokens " +
                        std::to_string(n_tokens));
            }
        }
    }
}

// matmul() as inference calls it (AVX2 uses integer activations for the K-quants), with 1 and 2 threads and
// token counts from decode to prefill: the scalar integer definition's bits, the same whatever the split.
TEST_P(MatmulInt8KquantAvx2, MatmulEqualsScalarDefinitionThreaded) {
    const TensorType type = GetParam();
    ASSERT_TRUE(matmul_uses_integer_activations(Isa::avx2, type));
    ThreadPool pool(2);
    const int64_t rows = 77, cols = 768;
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 99);
    for (int64_t n_tokens : {1, 4, 19}) {
        const std::vector<float> X = random_activations(n_tokens * cols, 100 + static_cast<uint32_t>(n_tokens));
        std::vector<float> want(static_cast<size_t>(n_tokens * rows)), one(want.size()), two(want.size());
        matmul_integer_with(Isa::scalar, type, W.data(), rows, cols, X.data(), n_tokens, want.data(), nullptr);
        matmul_with(Isa::avx2, type, W.data(), rows, cols, X.data(), n_tokens, one.data(), nullptr);
        matmul_with(Isa::avx2, type, W.data(), rows, cols, X.data(), n_tokens, two.data(), &pool);
        expect_bitwise(one, want, "1 thread, tokens " + std::to_string(n_tokens));
        expect_bitwise(two, want, "2 threads, tokens " + std::to_string(n_tokens));
    }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulInt8KquantAvx2,
                         ::testing::Values(TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         [](const ::testing::TestParamInfo<TensorType>& info) {
                             return std::string(tensor_type_traits(info.param).name);
                         });

}  // namespace
}  // namespace kvstash
