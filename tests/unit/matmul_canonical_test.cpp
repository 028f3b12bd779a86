// One set of bits for matmul on every CPU path (issue 32; docs/architecture/canonical-matmul.md): for every
// weight type, matmul() on each path this CPU runs (scalar, avx2, avx512 and, in a child process,
// avx512-novnni) equals the scalar path bitwise, at the shapes inference uses (SmolLM2's 576 and Gemma 3's
// 640 widths, K-quant widths, a ragged f32 width) and for 1..N tokens, whether the tokens come in one batch,
// one at a time, or split over threads. The float types are also compared with reference::matmul (the
// definition of their canonical f32 dot product).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/tensor_type.h"
#include "support/every_path.h"
#include "support/random_operands.h"

namespace kvstash {
namespace {

using test::random_activations;

std::vector<TensorType> every_type() {
    std::vector<TensorType> types(std::begin(test::kAllTensorTypes), std::end(test::kAllTensorTypes));
    types.push_back(kTensorTypeQ5_0);
    return types;
}

// rows × cols weights of `type`; q5_0 (not in random_weights): random bits and fp16 scales near ±0.01.
std::vector<uint8_t> weights_of(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
    if (type != kTensorTypeQ5_0) return test::random_weights(type, rows, cols, seed);
    std::mt19937 rng(seed);
    std::vector<uint8_t> w(tensor_row_bytes(type, cols) * static_cast<uint64_t>(rows));
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    for (size_t off = 0; off < w.size(); off += 22) test::put_fp16(w.data() + off, (rng() % 2 ? 0.01f : -0.01f));
    return w;
}

// Column counts for a type: the widths of SmolLM2 (576) and Gemma 3 270M (640, and 2048 for its FFN); the
// K-quants need multiples of 256; the float types also take a width that is no multiple of 16.
std::vector<int64_t> widths(TensorType type) {
    if (tensor_type_traits(type).block_size == 256) return {256, 512, 2048};
    if (tensor_type_traits(type).block_size == 1) return {37, 576, 640};
    return {64, 576, 640};
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(0, std::memcmp(&got[i], &want[i], 4))
            << what << ": element " << i << ": " << got[i] << " vs " << want[i];
    }
}

// Y = X · Wᵀ on `isa`: all tokens at once (threads as given), and one token at a time; both equal to the
// scalar path's bits.
void check_path(Isa isa, ThreadPool* pool) {
    const int64_t rows = 37;  // partial row tiles and thread shares
    for (TensorType type : every_type()) {
        for (int64_t cols : widths(type)) {
            const std::vector<uint8_t> W = weights_of(type, rows, cols, 7 + static_cast<uint32_t>(cols));
            for (int64_t n_tokens : {1, 2, 3, 6, 7, 10, 67}) {
                const std::vector<float> X =
                    random_activations(n_tokens * cols, 31 + static_cast<uint32_t>(n_tokens * cols));
                const std::string what = std::string(isa_name(isa)) + " " +
                                         tensor_type_name(static_cast<uint32_t>(type)) + " cols " +
                                         std::to_string(cols) + " tokens " + std::to_string(n_tokens);
                std::vector<float> want(static_cast<size_t>(n_tokens * rows)), got(want.size()), one(want.size());
                matmul_with(Isa::scalar, type, W.data(), rows, cols, X.data(), n_tokens, want.data(), nullptr);
                matmul_with(isa, type, W.data(), rows, cols, X.data(), n_tokens, got.data(), pool);
                expect_same_bits(got, want, what + " (batched)");
                for (int64_t t = 0; t < n_tokens; ++t) {
                    matmul_with(isa, type, W.data(), rows, cols, X.data() + t * cols, 1, one.data() + t * rows, pool);
                }
                expect_same_bits(one, want, what + " (one token at a time)");
                if (tensor_type_traits(type).block_size == 1) {
                    std::vector<float> ref(want.size());
                    reference::matmul(type, W.data(), rows, cols, X.data(), n_tokens, ref.data());
                    expect_same_bits(want, ref, what + " (reference::matmul)");
                }
            }
        }
    }
}

TEST(MatmulCanonical, EveryIsaEqualsScalarBitwise) {
    for (Isa isa : available_isas()) check_path(isa, nullptr);
}

TEST(MatmulCanonical, EveryIsaEqualsScalarBitwiseWithThreads) {
    ThreadPool pool(3);
    for (Isa isa : available_isas()) check_path(isa, &pool);
}

// What matmul() itself runs in this process (KVSTASH_ISA as set), against the scalar path.
TEST(MatmulCanonical, ActivePathEqualsScalarBitwise) { check_path(active_isa(), nullptr); }

// The test above in a child process per KVSTASH_ISA setting this CPU runs, avx512-novnni included (whether the
// AVX-512 path uses its VNNI kernels is read once per process).
TEST(MatmulCanonical, EveryPathEqualsScalarBitwise) {
    if (test::forced_isa()) GTEST_SKIP() << "KVSTASH_ISA is set: ActivePathEqualsScalarBitwise checks this path";
    for (const std::string& setting : test::failing_paths("MatmulCanonical.ActivePathEqualsScalarBitwise")) {
        ADD_FAILURE() << "matmul differs from the scalar path on KVSTASH_ISA=" << setting;
    }
}

// Every path uses the same activations for a type (integer for the block-quantized types, f32 otherwise).
TEST(MatmulCanonical, OneActivationKindPerType) {
    for (TensorType type : every_type()) {
        const bool quantized = tensor_type_traits(type).block_size > 1;
        for (Isa isa : available_isas()) {
            EXPECT_EQ(matmul_uses_integer_activations(isa, type), quantized)
                << isa_name(isa) << " " << tensor_type_name(static_cast<uint32_t>(type));
        }
    }
}

}  // namespace
}  // namespace kvstash
