// Weights repacked at load for the AVX-512 prefill tiles (backends/cpu/matmul/repack_tiles.h; q4_0, q4_1, q8_0, q4_K,
// q6_K): a matmul given the repacked matrix is bitwise the scalar definition (reference/matmul_int8_ref.cpp) on the
// file's layout, for 1..40 tokens, partial tiles (rows past a 32-row tile, a short column chunk), 1-3 threads and row
// ranges cut inside a tile; each token of a batch bitwise itself alone. The tests run on the process's path
// (KVSTASH_ISA) and, through the every-path test, in a child per path (scalar, avx2, avx512, avx512-novnni: paths that
// do not read the layout must ignore it), and again with KVSTASH_FEW_TOKENS_MAX=2 so that from 3 tokens up the tiles,
// not the few-token kernels, take the products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/matmul/repack_tiles.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/numerics.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/tensor_type.h"
#include "kvstash/model.h"
#include "support/eval_helpers.h"
#include "support/every_path.h"
#include "support/matmul_checks.h"
#include "support/paths.h"
#include "support/random_operands.h"

namespace kvstash {
namespace {

using test::expect_same_bits;
using test::random_weights;

std::vector<uint8_t> repacked(TensorType type, const std::vector<uint8_t>& W, int64_t rows, int64_t cols) {
    std::vector<uint8_t> tiles(kernels::repacked_bytes(type, rows, cols));
    kernels::repack_tiles(type, W.data(), rows, cols, tiles.data());
    return tiles;
}

// Random weights (seed), their tiles, and edge activations (seed + 2).
struct Operands {
    std::vector<uint8_t> W, tiles;
    std::vector<float> X;
};
Operands operands(TensorType type, int64_t rows, int64_t cols, int64_t n_tokens, uint32_t seed) {
    std::vector<uint8_t> W = random_weights(type, rows, cols, seed);
    std::vector<uint8_t> tiles = repacked(type, W, rows, cols);
    return {std::move(W), std::move(tiles), test::edge_activations(n_tokens, cols, seed + 2)};
}

class RepackTiles : public ::testing::TestWithParam<TensorType> {};

std::string type_name(const ::testing::TestParamInfo<TensorType>& info) {
    return tensor_type_name(static_cast<uint32_t>(info.param));
}

TEST_P(RepackTiles, EveryTokenCountAndThreadCountEqualsTheScalarDefinition) {
    const TensorType type = GetParam();
    struct Shape {
        int64_t rows, cols;
    };
    // 40 × 2048: a full tile and 8 rows of a second, two column chunks; 21 × 1280: one partial tile, a short chunk.
    ThreadPool two(2), three(3);
    for (const Shape shape : {Shape{40, 2048}, Shape{21, 1280}}) {
        const std::vector<uint8_t> W =
            random_weights(type, shape.rows, shape.cols, 5 + static_cast<uint32_t>(shape.cols));
        const std::vector<uint8_t> tiles = repacked(type, W, shape.rows, shape.cols);
        for (int64_t n_tokens = 1; n_tokens <= 40; ++n_tokens) {
            const std::vector<float> X =
                test::edge_activations(n_tokens, shape.cols, 9 + static_cast<uint32_t>(n_tokens));
            std::vector<float> want(static_cast<size_t>(n_tokens * shape.rows));
            matmul_integer_with(Isa::scalar, type, W.data(), shape.rows, shape.cols, X.data(), n_tokens, want.data(),
                                nullptr);
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two, &three}) {
                std::vector<float> got(want.size());
                matmul_integer_with(active_isa(), type, W.data(), shape.rows, shape.cols, X.data(), n_tokens,
                                    got.data(), pool, tiles.data());
                expect_same_bits(got, want, shape.rows,
                                 std::string(isa_name(active_isa())) + " " + std::to_string(shape.rows) + "x" +
                                     std::to_string(shape.cols) + ", " + std::to_string(n_tokens) + " tokens, " +
                                     std::to_string(pool ? pool->n_threads() : 1) + " threads");
            }
        }
    }
}

TEST_P(RepackTiles, TokenOfABatchEqualsItAlone) {
    const TensorType type = GetParam();
    const int64_t rows = 112, cols = 2048, n_tokens = 40;
    const auto [W, tiles, X] = operands(type, rows, cols, n_tokens, 21);
    ThreadPool pool(3);
    std::vector<float> batch(static_cast<size_t>(n_tokens * rows));
    matmul_integer_with(active_isa(), type, W.data(), rows, cols, X.data(), n_tokens, batch.data(), &pool,
                        tiles.data());
    std::vector<float> alone(static_cast<size_t>(rows));
    for (int64_t m = 0; m < n_tokens; ++m) {
        matmul_integer_with(active_isa(), type, W.data(), rows, cols, X.data() + m * cols, 1, alone.data(), nullptr,
                            tiles.data());
        ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + m * rows, 4 * static_cast<size_t>(rows)))
            << isa_name(active_isa()) << ": token " << m << " of " << n_tokens;
    }
}

// Row ranges that start and end inside 32-row tiles (the dispatcher cuts at multiples of 32 where tiles are given;
// a kernel must still store only its own rows, and the same bits).
TEST_P(RepackTiles, RowRangesInsideATileDoNotChangeTheResult) {
    const TensorType type = GetParam();
    const int64_t rows = 112, cols = 2048, n_tokens = 40;
    const auto [W, tiles, X] = operands(type, rows, cols, n_tokens, 31);
    kernels::QuantizedActivations xq;
    kernels::quantize_activations(X.data(), n_tokens, cols, kernels::activation_block(type), xq, nullptr);
    const kernels::MatmulRowsFn kernel = kernels::kernel_table(active_isa()).matmul_int8_rows;
    auto run = [&](std::initializer_list<int64_t> cuts, const uint8_t* t) {
        std::vector<float> Y(static_cast<size_t>(n_tokens * rows), -1.0f);
        kernels::MatmulArgs args{type,     W.data(), tensor_row_bytes(type, cols), cols, X.data(), n_tokens,
                                 Y.data(), rows};
        args.xq = &xq;
        args.tiles = t;
        const std::vector<int64_t> c(cuts);
        for (size_t i = 0; i + 1 < c.size(); ++i) kernel(args, c[i], c[i + 1]);
        return Y;
    };
    const std::vector<float> want = run({0, rows}, nullptr);
    expect_same_bits(run({0, rows}, tiles.data()), want, rows, "whole");
    expect_same_bits(run({0, 16, 48, 96, rows}, tiles.data()), want, rows, "16-row cuts");
    expect_same_bits(run({0, 5, 37, 38, 101, rows}, tiles.data()), want, rows, "odd cuts");
}

// The tiles are what the kernels read where they read them: another matrix's tiles given with W give that matrix's
// products (so the tests above exercise the repacked path, not only the file's layout). At 40 tokens (the tiles on
// every threshold), and in the child run with KVSTASH_FEW_TOKENS_MAX=2 (tiles from 3 tokens with VNNI) also at 3 and
// 8 tokens: verification batches.
TEST_P(RepackTiles, TheTilesAreWhatIsRead) {
    const TensorType type = GetParam();
    if (!kernels::matmul_reads_repacked(active_isa(), type))
        GTEST_SKIP() << "this path does not read repacked " << tensor_type_name(static_cast<uint32_t>(type));
    const char* few = std::getenv("KVSTASH_FEW_TOKENS_MAX");
    // (Without VNNI, up to 8 tokens stay on the AVX2 kernels whatever the threshold: gemm_int8_avx512.cpp.)
    const bool tiles_from_3 = few != nullptr && std::string(few) == "2" && avx512_uses_vnni();
    const int64_t rows = 40, cols = 2048;
    const std::vector<uint8_t> W = random_weights(type, rows, cols, 51), other = random_weights(type, rows, cols, 53);
    const std::vector<uint8_t> other_tiles = repacked(type, other, rows, cols);
    for (const int64_t n_tokens : tiles_from_3 ? std::vector<int64_t>{3, 8, 40} : std::vector<int64_t>{40}) {
        const std::vector<float> X = test::edge_activations(n_tokens, cols, 55);
        std::vector<float> want(static_cast<size_t>(n_tokens * rows)), got(want.size());
        matmul_integer_with(Isa::scalar, type, other.data(), rows, cols, X.data(), n_tokens, want.data(), nullptr);
        matmul_integer_with(active_isa(), type, W.data(), rows, cols, X.data(), n_tokens, got.data(), nullptr,
                            other_tiles.data());
        expect_same_bits(got, want, rows, "the other matrix's tiles, " + std::to_string(n_tokens) + " tokens");
    }
}

// The point of the layout: the file's bytes per weight, not int8 (repack_tiles.h), at the widths of Llama 3.1 8B.
TEST_P(RepackTiles, KeepsTheFilesBytesPerWeight) {
    const TensorType type = GetParam();
    for (const int64_t cols : {4096, 14336}) {
        const auto file = static_cast<double>(tensor_row_bytes(type, cols) * 4096);
        const auto tiles = static_cast<double>(kernels::repacked_bytes(type, 4096, cols));
        EXPECT_GE(tiles, file);  // q4_0 / q4_1: exactly the file's bytes (fp16 scales kept)
        EXPECT_LT(tiles, 1.06 * file) << cols << " columns";
    }
}

INSTANTIATE_TEST_SUITE_P(Types, RepackTiles,
                         ::testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0, TensorType::Q4_K,
                                           TensorType::Q6_K),
                         type_name);

// Whole models whose layers this path repacks at load (q8_0; gemma3_tiny's q5_0, repacked to q8_0 off AVX2; gpt2's
// fused Q|K|V, three row views each repacked on its own; the tiny q4_0 / q4_1 models): a 40-token prompt in one call
// (the tiles, from the repacked copy) gives bitwise the logits of the same tokens one at a time (the decode kernels,
// from the file's layout), and `describe` (kvstash info) names the repacked bytes exactly where they are made.
TEST(RepackTilesModel, PromptInOneCallEqualsTokenByToken) {
    struct Case {
        const char* file;
        TensorType layers;
    };
    for (const Case c : {Case{"qwen2/qwen2_q8_0.gguf", TensorType::Q8_0}, Case{"gpt2/gpt2_q8_0.gguf", TensorType::Q8_0},
                         Case{"gemma3_tiny/gemma3_tiny_q5_0.gguf", TensorType::Q8_0},
                         Case{"tiny/q_q4_0.gguf", TensorType::Q4_0}, Case{"tiny/q_q4_1.gguf", TensorType::Q4_1}}) {
        const char* file = c.file;
        SCOPED_TRACE(file);
        const auto model = Model::load(test::fixture_path(file));
        const bool repacks = kernels::matmul_reads_repacked(active_isa(), c.layers);
        EXPECT_EQ(model->describe().find("repacked:") != std::string::npos, repacks) << model->describe();
        const std::vector<int32_t> tokens = test::pseudo_random_tokens(40, model->n_vocab(), 7);
        const std::vector<float> together = test::eval_logits(model, tokens, {40}, 2);
        const std::vector<float> one_by_one = test::eval_logits(model, tokens, {1}, 1);
        ASSERT_EQ(together.size(), one_by_one.size());
        EXPECT_EQ(0, std::memcmp(together.data(), one_by_one.data(), 4 * together.size()));
    }
}

// ModelLoadOptions: the repacking on 1 thread or on more threads than matrices gives the same model (the same logits),
// and on_progress hears it on the loading thread, done never falling, ending at done == total == the bytes `describe`
// names; where this path repacks nothing it is not called. A negative thread count is refused.
TEST(RepackTilesModel, LoadThreadsAndProgress) {
    const std::string file = test::fixture_path("qwen2/qwen2_q8_0.gguf");
    const bool repacks = kernels::matmul_reads_repacked(active_isa(), TensorType::Q8_0);
    std::vector<LoadProgress> heard;
    const std::thread::id loader = std::this_thread::get_id();
    bool other_thread = false;
    ModelLoadOptions one;
    one.n_threads = 1;
    one.on_progress = [&](const LoadProgress& p) {
        heard.push_back(p);
        other_thread |= std::this_thread::get_id() != loader;
    };
    const auto single = Model::load(file, one);
    const auto many = Model::load(file, ModelLoadOptions{.n_threads = 64});
    EXPECT_FALSE(other_thread);
    if (repacks) {
        ASSERT_FALSE(heard.empty());
        const std::string described = single->describe();
        const size_t at = described.find("repacked:");
        ASSERT_NE(at, std::string::npos) << described;
        const uint64_t bytes = std::stoull(described.substr(at + 9));
        EXPECT_EQ(heard.back().done, bytes);
        for (size_t i = 0; i < heard.size(); ++i) {
            EXPECT_EQ(heard[i].total, bytes);
            EXPECT_LE(heard[i].done, heard[i].total);
            if (i > 0) {
                EXPECT_GE(heard[i].done, heard[i - 1].done);
            }
            EXPECT_FALSE(heard[i].what.empty());
        }
    } else {
        EXPECT_TRUE(heard.empty());
    }
    const std::vector<int32_t> tokens = test::pseudo_random_tokens(40, single->n_vocab(), 11);
    const std::vector<float> a = test::eval_logits(single, tokens, {40}, 2);
    const std::vector<float> b = test::eval_logits(many, tokens, {40}, 2);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 4 * a.size()));
    try {
        Model::load(file, ModelLoadOptions{.n_threads = -1});
        ADD_FAILURE() << "a negative thread count was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    }
}

TEST(RepackTilesEveryPath, EveryPathAndTheTilesFromThreeTokens) {
    if (test::forced_isa()) GTEST_SKIP() << "a child of this test (KVSTASH_ISA set)";
    EXPECT_EQ(test::failing_paths("Types/RepackTiles.*:RepackTilesModel.*"), std::vector<std::string>{});
    std::vector<std::string> failed;
    for (const std::string& setting : isa_settings()) {
        const std::string run = "KVSTASH_FEW_TOKENS_MAX=2 KVSTASH_ISA=" + setting + " " + test::self_command() +
                                " --gtest_filter='Types/RepackTiles.*:RepackTilesModel.*'";
        if (test::run_child(run) != 0) failed.push_back(setting);
    }
    EXPECT_EQ(failed, std::vector<std::string>{}) << "with KVSTASH_FEW_TOKENS_MAX=2";
}

}  // namespace
}  // namespace kvstash
