// The aarch64 integer-activation kernels (backends/cpu/matmul/matmul_int8_neon.h) called directly, both of them in one
// process: the widening-multiply one (every aarch64 CPU) and the dot-product one (where the CPU has FEAT_DotProd: under
// qemu-aarch64 -cpu max it does), bitwise against the scalar definition (reference/matmul_int8_ref.cpp) for every
// block type, on random weights and on weights and activations at their extremes; and the NEON activation quantizer
// bitwise the scalar one. (unit_matmul runs the kernel the dispatch chose through matmul(); the neon-nodotprod child
// of unit_matmul_canonical / unit_numerics the other.) Compiled on aarch64 only (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
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

std::vector<float> run_rows(kernels::MatmulRowsFn fn, TensorType type, const std::vector<uint8_t>& W, int64_t rows,
                            int64_t cols, const std::vector<float>& X, int64_t n_tokens) {
    kernels::QuantizedActivations xq;
    kernels::quantize_activations(X.data(), n_tokens, cols, kernels::activation_block(type), xq, nullptr);
    std::vector<float> Y(static_cast<size_t>(n_tokens * rows), std::nanf(""));
    const kernels::MatmulArgs args{type, W.data(), tensor_row_bytes(type, cols), cols, X.data(), n_tokens, Y.data(),
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

// The NEON kernels this CPU runs, with their names.
std::vector<std::pair<std::string, kernels::MatmulRowsFn>> neon_kernels() {
    std::vector<std::pair<std::string, kernels::MatmulRowsFn>> fns = {{"neon", kernels::matmul_int8_rows_neon}};
    if (cpu_supports_neon_dotprod()) fns.emplace_back("neon_dotprod", kernels::matmul_int8_rows_neon_dotprod);
    return fns;
}

// Says loudly where the dot-product kernel is left out of the tests below (an aarch64 CPU without FEAT_DotProd;
// qemu-aarch64 -cpu max, where scripts/arm64_check.sh runs them, has it).
TEST(MatmulInt8Neon, DotprodKernelIsTestedHere) {
    if (!cpu_supports_neon_dotprod()) {
        GTEST_SKIP() << "THIS CPU HAS NO FEAT_DotProd: matmul_int8_rows_neon_dotprod is not tested here";
    }
    EXPECT_EQ(neon_kernels().size(), 2u);
}

const TensorType kBlockTypes[] = {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                  TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

TEST(MatmulInt8Neon, EqualsScalarDefinitionOnRandomOperands) {
    for (TensorType type : kBlockTypes) {
        for (int64_t cols : {256, 768}) {
            const int64_t rows = 13;
            const std::vector<uint8_t> W = random_weights(type, rows, cols, 7 + static_cast<uint32_t>(cols));
            for (int64_t n_tokens : {1, 3}) {
                const std::vector<float> X = random_activations(n_tokens * cols, 11 + static_cast<uint32_t>(n_tokens));
                const std::vector<float> want =
                    run_rows(kernels::reference::matmul_int8_rows_scalar, type, W, rows, cols, X, n_tokens);
                for (const auto& [name, fn] : neon_kernels()) {
                    expect_bitwise(run_rows(fn, type, W, rows, cols, X, n_tokens), want,
                                   name + " " + tensor_type_traits(type).name + " cols " + std::to_string(cols) +
                                       " tokens " + std::to_string(n_tokens));
                }
            }
        }
    }
}

// Every quant bit set (the largest weights, scales and mins of each type; q6_K's scales at -128 and 127 by row) and
// every activation at +-32639 in several sign patterns: the integer sums at their bounds.
TEST(MatmulInt8Neon, EqualsScalarDefinitionAtExtremeIntegers) {
    for (TensorType type : kBlockTypes) {
        const int64_t rows = 5, cols = 512;
        const uint64_t row_bytes = tensor_row_bytes(type, cols);
        const uint32_t block_bytes = tensor_type_traits(type).type_size;
        std::vector<uint8_t> W(row_bytes * rows, 0xFF);
        for (uint64_t off = 0; off < W.size(); off += block_bytes) {
            uint8_t* blk = W.data() + off;
            const auto row = static_cast<int>(off / row_bytes);
            if (type == TensorType::Q6_K) {
                std::memset(blk + 192, row % 2 ? 0x80 : 0x7F, 16);
                test::put_fp16(blk + 208, 0.001f);
            } else {
                test::put_fp16(blk, 0.001f);
                if (type != TensorType::Q8_0 && type != TensorType::Q4_0) test::put_fp16(blk + 2, -0.003f);
            }
            if (type == TensorType::Q8_0 && row % 2) std::memset(blk + 2, 0x80, 32);  // -128
        }
        for (int pattern = 0; pattern < 3; ++pattern) {
            const int64_t n_tokens = 2;
            std::vector<float> X(static_cast<size_t>(n_tokens * cols));
            for (size_t i = 0; i < X.size(); ++i) {
                X[i] = pattern == 0 || (pattern == 2 && (i / 4) % 2) ? 1.0f : -1.0f;
            }
            const std::vector<float> want =
                run_rows(kernels::reference::matmul_int8_rows_scalar, type, W, rows, cols, X, n_tokens);
            for (const auto& [name, fn] : neon_kernels()) {
                expect_bitwise(run_rows(fn, type, W, rows, cols, X, n_tokens), want,
                               name + " " + tensor_type_traits(type).name + " pattern " + std::to_string(pattern));
            }
        }
    }
}

TEST(MatmulInt8Neon, QuantizerEqualsScalarBitwise) {
    for (int64_t block : {32, 256}) {
        const int64_t cols = 1024;
        std::vector<float> x = random_activations(cols, 5 + static_cast<uint32_t>(block));
        x[3] = std::nanf("");  // a NaN is skipped by the block maximum
        x[300] = 0.0f;
        for (int64_t k = 512; k < 512 + 32; ++k) x[static_cast<size_t>(k)] = -0.0f;  // an all-zero block
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
        const Out a = run(kernels::reference::quantize_activation_row), b = run(kernels::quantize_activation_row_neon);
        EXPECT_EQ(a.h, b.h) << block;
        EXPECT_EQ(a.l, b.l) << block;
        EXPECT_EQ(0, std::memcmp(a.d.data(), b.d.data(), 4 * a.d.size())) << block;
        EXPECT_EQ(a.h32, b.h32) << block;
        EXPECT_EQ(a.l32, b.l32) << block;
        EXPECT_EQ(a.h16, b.h16) << block;
        EXPECT_EQ(a.l16, b.l16) << block;
    }
}

}  // namespace
}  // namespace kvstash
