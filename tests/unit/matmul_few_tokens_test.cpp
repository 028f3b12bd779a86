// The integer-activation matmul at a few tokens (speculative verification of k guesses, continuous batching
// of a few sequences): on every ISA this CPU runs, every token count 1..16 (on AVX-512 VNNI: the decode
// kernels at 1-2, the few-token kernels that unpack each weight once for all tokens above, the many-token
// kernels past the per-type threshold few_tokens_max) is bitwise the scalar definition (reference/matmul_int8_ref.cpp),
// for every integer-path type, with full and partial 16-row tiles and an odd block count (an unpaired last block); and
// each token of a batch is bitwise the same token alone, whatever the thread count and row range.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/tensor_type.h"
#include "support/matmul_checks.h"
#include "support/random_operands.h"

namespace kvstash {
namespace {

using test::expect_same_bits;
using test::random_activations;
using test::random_weights;
using test::same_bits;

std::vector<TensorType> integer_types() {
    std::vector<TensorType> types;
    for (TensorType type : test::kAllTensorTypes) {
        if (kernels::has_integer_path(type)) types.push_back(type);
    }
    return types;
}

// 32-element blocks: 3 blocks (a pair and an unpaired one), SmolLM2's 576 (18 blocks) and Gemma 3's 640; the
// K-quants: one super-block and three.
std::vector<int64_t> widths(TensorType type) {
    if (tensor_type_traits(type).block_size == 256) return {256, 768};
    return {96, 576, 640};
}

// Random activations with the edge rows of the integer ranges: token 1 all zeros, token 2 one huge value per
// block (its scale set by it, the other elements rounding to small integers).
std::vector<float> activations(int64_t n_tokens, int64_t cols, uint32_t seed) {
    std::vector<float> X = random_activations(n_tokens * cols, seed);
    if (n_tokens >= 3) {
        std::fill(X.begin() + cols, X.begin() + 2 * cols, 0.0f);
        for (int64_t k = 0; k < cols; k += 32) X[static_cast<size_t>(2 * cols + k)] = 1e6f;
    }
    return X;
}

std::string name(Isa isa, TensorType type, int64_t rows, int64_t cols, int64_t n_tokens) {
    return std::string(isa_name(isa)) + " " + tensor_type_name(static_cast<uint32_t>(type)) + " " +
           std::to_string(rows) + "x" + std::to_string(cols) + ", " + std::to_string(n_tokens) + " tokens";
}

TEST(MatmulFewTokens, EveryTokenCountEqualsTheScalarDefinitionBitwise) {
    for (TensorType type : integer_types()) {
        for (int64_t cols : widths(type)) {
            // 16: one full tile; 37: two full tiles and a partial one of 5 rows.
            for (int64_t rows : {16, 37}) {
                const std::vector<uint8_t> W = random_weights(type, rows, cols, 3 + static_cast<uint32_t>(rows * cols));
                for (int64_t n_tokens = 1; n_tokens <= 16; ++n_tokens) {
                    const std::vector<float> X = activations(n_tokens, cols, 17 + static_cast<uint32_t>(n_tokens));
                    std::vector<float> want(static_cast<size_t>(n_tokens * rows));
                    matmul_integer_with(Isa::scalar, type, W.data(), rows, cols, X.data(), n_tokens, want.data(),
                                        nullptr);
                    for (Isa isa : available_isas()) {
                        std::vector<float> got(want.size());
                        matmul_integer_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, got.data(), nullptr);
                        expect_same_bits(got, want, rows, name(isa, type, rows, cols, n_tokens));
                    }
                }
            }
        }
    }
}

// Token t of an n-token call equals a 1-token call on it (the decode kernel), with 1..3 threads splitting
// the rows (tasks or shares) and with row ranges that start inside a tile.
TEST(MatmulFewTokens, TokenOfABatchEqualsItAloneBitwise) {
    const int64_t rows = 301;  // enough rows for the pool to split them
    for (TensorType type : integer_types()) {
        const int64_t cols = widths(type).back();
        const uint64_t row_bytes = tensor_row_bytes(type, cols);
        const std::vector<uint8_t> W = random_weights(type, rows, cols, 41);
        for (int64_t n_tokens : {3, 4, 5, 8, 9, 12, 16}) {
            const std::vector<float> X = activations(n_tokens, cols, 43 + static_cast<uint32_t>(n_tokens));
            std::vector<float> alone(static_cast<size_t>(n_tokens * rows));
            for (Isa isa : available_isas()) {
                for (int64_t t = 0; t < n_tokens; ++t) {
                    matmul_integer_with(isa, type, W.data(), rows, cols, X.data() + t * cols, 1,
                                        alone.data() + t * rows, nullptr);
                }
                for (int n_threads : {1, 2, 3}) {
                    ThreadPool pool(n_threads);
                    std::vector<float> batch(alone.size());
                    matmul_integer_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, batch.data(), &pool);
                    expect_same_bits(
                        batch, alone, rows,
                        name(isa, type, rows, cols, n_tokens) + ", " + std::to_string(n_threads) + " threads");
                }
                // Rows 7..301: every tile of this call straddles two of the full call's.
                const int64_t r0 = 7, nr = rows - r0;
                std::vector<float> part(static_cast<size_t>(n_tokens * nr));
                matmul_integer_with(isa, type, W.data() + r0 * row_bytes, nr, cols, X.data(), n_tokens, part.data(),
                                    nullptr);
                for (int64_t t = 0; t < n_tokens; ++t) {
                    for (int64_t r = r0; r < rows; ++r) {
                        ASSERT_TRUE(same_bits(part[static_cast<size_t>(t * nr + r - r0)],
                                              alone[static_cast<size_t>(t * rows + r)]))
                            << name(isa, type, rows, cols, n_tokens) << ", rows from " << r0 << ": token " << t
                            << " row " << r;
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace kvstash
