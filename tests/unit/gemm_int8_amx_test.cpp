// The AMX q8_0 / q4_K prefill tiles (backends/cpu/matmul/gemm_int8_amx.h) and their dispatch (KVSTASH_ISA=amx):
//   * where AMX does not run (no CPUID bits, the tile state refused, or a faulting tile instruction): the dispatcher
//     never picks it, by default or in its settings, and KVSTASH_ISA=amx is refused with what the detection found;
//   * where it runs: listed among the settings but taken only with KVSTASH_ISA=amx (opt-in: not faster than the VNNI
//     tiles where measured); the kernel (q8_0 and q4_K), called directly, is bitwise the scalar definition
//     (reference/matmul_int8_ref.cpp) for 1..41 tokens (a full group of 16, partial groups, 3 groups), partial 32-row
//     tiles and short column chunks, row ranges cut inside a tile, and the largest integer sums; each token of a batch
//     is bitwise itself alone; through matmul() with 1-3 threads; and whole tiny models' logits of a 40-token prompt on
//     the amx path equal the scalar path's (a child process with KVSTASH_ISA=scalar), bitwise.
// The AMX-only tests skip, naming the detection's finding, on a CPU without AMX (scripts/amx_check.sh runs them
// where it is).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "backends/cpu/matmul/gemm_int8.h"
#include "backends/cpu/matmul/gemm_int8_amx.h"
#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/matmul/repack_tiles.h"
#include "backends/cpu/runtime/amx.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/numerics.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "kvstash/instruction_sets.h"
#include "kvstash/model.h"
#include "support/eval_helpers.h"
#include "support/every_path.h"
#include "support/matmul_checks.h"
#include "support/paths.h"
#include "support/random_operands.h"

namespace kvstash {
namespace {

using test::expect_same_bits;

constexpr TensorType kQ8 = TensorType::Q8_0;

#define SKIP_WITHOUT_AMX()                                                                     \
    if (!cpu_supports_amx()) {                                                                 \
        GTEST_SKIP() << "SKIPPED: this CPU does not run AMX tiles (" << amx_detection_detail() \
                     << "); scripts/amx_check.sh runs this test on a machine that does";       \
    }

std::string isa_env() {
    const char* forced = std::getenv("KVSTASH_ISA");
    return forced != nullptr ? forced : "";
}

bool forced_amx() {
    const char* forced = std::getenv("KVSTASH_ISA");
    return forced != nullptr && std::string(forced) == kAvx512Amx;
}

// ---- where AMX does not run: never chosen ----

TEST(AmxDispatch, DetectionSaysWhatItFound) {
    EXPECT_FALSE(amx_detection_detail().empty());
    std::printf("AMX detection: %s: %s\n", cpu_supports_amx() ? "usable" : "not usable",
                amx_detection_detail().c_str());
    if (!cpuid_reports_amx()) {
        EXPECT_FALSE(cpu_supports_amx());
    }
    if (cpu_supports_amx()) {
        EXPECT_TRUE(cpu_supports_avx512_vnni());
    }
}

TEST(AmxDispatch, NeverChosenWhereAmxDoesNotRun) {
    if (cpu_supports_amx()) GTEST_SKIP() << "this CPU runs AMX (AmxDispatch.ListedAndTakenOnlyWhenAsked checks it)";
    EXPECT_FALSE(avx512_uses_amx());
    for (const std::string& setting : isa_settings()) EXPECT_NE(setting, kAvx512Amx);
    if (!forced_amx()) {
        const InstructionSets sets = instruction_sets();
        EXPECT_NE(sets.active, kAvx512Amx);
        for (const std::string& isa : sets.available) EXPECT_NE(isa, kAvx512Amx);
    }
#if KVSTASH_HAVE_X86_KERNELS
    if (cpu_supports(Isa::avx512)) {
        EXPECT_NE(kernels::kernel_table(Isa::avx512).matmul_int8_rows, &kernels::gemm_int8_rows_amx);
    }
#endif
}

// A child of the next test (KVSTASH_ISA=amx on a CPU without AMX): refused, as a path the CPU lacks is.
TEST(AmxDispatch, ForcedAmxIsRefusedChild) {
    if (!forced_amx()) GTEST_SKIP() << "a child of AmxDispatch.ForcedAmxIsRefusedWhereAmxDoesNotRun (KVSTASH_ISA=amx)";
    if (cpu_supports_amx()) GTEST_SKIP() << "this CPU runs AMX";
    try {
        (void)active_isa();
        FAIL() << "KVSTASH_ISA=amx was accepted on a CPU without AMX";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("KVSTASH_ISA=amx"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(amx_detection_detail()), std::string::npos) << e.what();
    }
    EXPECT_FALSE(avx512_uses_amx());
}

TEST(AmxDispatch, ForcedAmxIsRefusedWhereAmxDoesNotRun) {
    if (test::forced_isa()) GTEST_SKIP() << "KVSTASH_ISA is set (a child)";
    if (cpu_supports_amx()) GTEST_SKIP() << "this CPU runs AMX";
    EXPECT_TRUE(test::passes_on_path(kAvx512Amx, "AmxDispatch.ForcedAmxIsRefusedChild"));
}

// ---- where AMX runs ----

// Opt-in: listed among the settings (the every-path tests run it), taken with KVSTASH_ISA=amx, never by default.
TEST(AmxDispatch, ListedAndTakenOnlyWhenAsked) {
    SKIP_WITHOUT_AMX();
    bool listed = false;
    for (const std::string& setting : isa_settings()) listed = listed || setting == kAvx512Amx;
    EXPECT_TRUE(listed);
    if (forced_amx()) {
        EXPECT_TRUE(avx512_uses_amx());
        EXPECT_EQ(instruction_sets().active, kAvx512Amx);
        EXPECT_EQ(kernels::kernel_table(Isa::avx512).matmul_int8_rows, &kernels::gemm_int8_rows_amx);
        EXPECT_TRUE(kernels::matmul_reads_repacked(Isa::avx512, kQ8));
    } else {
        EXPECT_FALSE(avx512_uses_amx()) << "KVSTASH_ISA=" << isa_env();
        EXPECT_NE(instruction_sets().active, kAvx512Amx);
        EXPECT_NE(kernels::kernel_table(Isa::avx512).matmul_int8_rows, &kernels::gemm_int8_rows_amx);
    }
}

std::vector<uint8_t> repacked(TensorType type, const std::vector<uint8_t>& W, int64_t rows, int64_t cols) {
    std::vector<uint8_t> tiles(kernels::repacked_bytes(type, rows, cols));
    kernels::repack_tiles(type, W.data(), rows, cols, tiles.data());
    return tiles;
}

// Y (n_tokens × rows, rows [row_begin, row_end) written; the others keep `fill`) by the AMX kernel called directly.
std::vector<float> amx_product(TensorType type, const std::vector<uint8_t>& W, const std::vector<uint8_t>& tiles,
                               int64_t rows, int64_t cols, const std::vector<float>& X, int64_t n_tokens,
                               int64_t row_begin, int64_t row_end, float fill = 0.0f) {
    kernels::QuantizedActivations xq;
    kernels::quantize_activations(X.data(), n_tokens, cols, kernels::activation_block(type), xq, nullptr);
    std::vector<float> Y(static_cast<size_t>(n_tokens * rows), fill);
    kernels::MatmulArgs args{type, W.data(), tensor_row_bytes(type, cols), cols, X.data(), n_tokens, Y.data(), rows};
    args.xq = &xq;
    args.tiles = tiles.data();
    kernels::gemm_repacked_rows_amx(args, row_begin, row_end);
    return Y;
}

std::vector<float> scalar_product(TensorType type, const std::vector<uint8_t>& W, int64_t rows, int64_t cols,
                                  const std::vector<float>& X, int64_t n_tokens) {
    std::vector<float> Y(static_cast<size_t>(n_tokens * rows));
    matmul_integer_with(Isa::scalar, type, W.data(), rows, cols, X.data(), n_tokens, Y.data(), nullptr);
    return Y;
}

struct Shape {
    int64_t rows, cols;
};
// 40 × 2048: a full 32-row tile and 8 rows of another, two whole 1,024-column chunks; 21 × 1280: one partial tile, a
// chunk and a short one (q8_0: 8 blocks, q4_K: 1 super-block); 64 × 4096: two full tiles, four chunks; 7 × 256: one
// short chunk.
constexpr Shape kShapes[] = {{40, 2048}, {21, 1280}, {64, 4096}, {7, 256}};

class GemmAmx : public ::testing::TestWithParam<TensorType> {};

std::string type_name(const ::testing::TestParamInfo<TensorType>& info) {
    return tensor_type_name(static_cast<uint32_t>(info.param));
}

TEST_P(GemmAmx, EveryTokenCountEqualsTheScalarDefinition) {
    SKIP_WITHOUT_AMX();
    const TensorType type = GetParam();
    for (const Shape s : kShapes) {
        SCOPED_TRACE(std::to_string(s.rows) + " x " + std::to_string(s.cols));
        const std::vector<uint8_t> W = test::random_weights(type, s.rows, s.cols, 11 + static_cast<uint32_t>(s.cols));
        const std::vector<uint8_t> tiles = repacked(type, W, s.rows, s.cols);
        for (int64_t n_tokens = 1; n_tokens <= 41; ++n_tokens) {
            const std::vector<float> X = test::edge_activations(n_tokens, s.cols, 3 + static_cast<uint32_t>(n_tokens));
            expect_same_bits(amx_product(type, W, tiles, s.rows, s.cols, X, n_tokens, 0, s.rows),
                             scalar_product(type, W, s.rows, s.cols, X, n_tokens), s.rows,
                             "amx, " + std::to_string(n_tokens) + " tokens");
        }
    }
}

// Row ranges that start or end inside a 32-row tile (as a thread's share may): those rows are the definition's, the
// others untouched.
TEST_P(GemmAmx, RowRangesCutInsideATile) {
    SKIP_WITHOUT_AMX();
    const TensorType type = GetParam();
    const int64_t rows = 70, cols = 1024, n_tokens = 19;
    const std::vector<uint8_t> W = test::random_weights(type, rows, cols, 23);
    const std::vector<uint8_t> tiles = repacked(type, W, rows, cols);
    const std::vector<float> X = test::edge_activations(n_tokens, cols, 29);
    const std::vector<float> want = scalar_product(type, W, rows, cols, X, n_tokens);
    struct Range {
        int64_t begin, end;
    };
    for (const Range r : {Range{5, 37}, Range{31, 33}, Range{33, 70}, Range{0, 1}, Range{64, 70}}) {
        const float untouched = -7.5f;
        const std::vector<float> got = amx_product(type, W, tiles, rows, cols, X, n_tokens, r.begin, r.end, untouched);
        for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t row = 0; row < rows; ++row) {
                const size_t i = static_cast<size_t>(t * rows + row);
                const bool inside = row >= r.begin && row < r.end;
                ASSERT_TRUE(test::same_bits(got[i], inside ? want[i] : untouched))
                    << "rows [" << r.begin << ", " << r.end << "), token " << t << ", row " << row;
            }
        }
    }
}

// Every weight at an extreme (q8_0: q = -128 or 127 alternating by row; q4_K: every nibble 15, every 6-bit scale and
// min 63) against saturated activation rows: the largest |S| per block, exact as the definition says.
TEST_P(GemmAmx, LargestBlockSums) {
    SKIP_WITHOUT_AMX();
    const TensorType type = GetParam();
    const int64_t rows = 33, cols = 2048, n_tokens = 18;
    const uint64_t row_bytes = tensor_row_bytes(type, cols);
    std::vector<uint8_t> W(static_cast<size_t>(rows) * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
        uint8_t* row = W.data() + static_cast<size_t>(r) * row_bytes;
        if (type == kQ8) {
            for (int64_t b = 0; b < cols / 32; ++b) {
                test::put_fp16(row + b * 34, r % 3 == 0 ? -0.5f : 0.25f);
                std::memset(row + b * 34 + 2, r % 2 == 0 ? 0x80 : 0x7F, 32);
            }
        } else {  // q4_K: d, dmin, 12 bytes of scales and mins, 128 bytes of nibbles
            for (int64_t b = 0; b < cols / 256; ++b) {
                uint8_t* blk = row + b * 144;
                test::put_fp16(blk, r % 3 == 0 ? -0.5f : 0.25f);
                test::put_fp16(blk + 2, 0.125f);
                std::memset(blk + 4, 0xFF, 12);
                std::memset(blk + 16, r % 2 == 0 ? 0xFF : 0x0F, 128);
            }
        }
    }
    std::vector<float> X = test::edge_activations(n_tokens, cols, 31);
    for (int64_t c = 0; c < cols; ++c) X[static_cast<size_t>(5 * cols + c)] = c % 2 == 0 ? -3.0f : 3.0f;
    for (int64_t c = 0; c < cols; ++c) X[static_cast<size_t>(6 * cols + c)] = -1e6f;
    expect_same_bits(amx_product(type, W, repacked(type, W, rows, cols), rows, cols, X, n_tokens, 0, rows),
                     scalar_product(type, W, rows, cols, X, n_tokens), rows, "extreme weights");
}

// Batch invariance: token m of a 40-token call is bitwise the same token alone (a padded group of one).
TEST_P(GemmAmx, EachTokenOfABatchEqualsItselfAlone) {
    SKIP_WITHOUT_AMX();
    const TensorType type = GetParam();
    const int64_t rows = 48, cols = 1280, n_tokens = 40;
    const std::vector<uint8_t> W = test::random_weights(type, rows, cols, 37);
    const std::vector<uint8_t> tiles = repacked(type, W, rows, cols);
    const std::vector<float> X = test::edge_activations(n_tokens, cols, 41);
    const std::vector<float> batch = amx_product(type, W, tiles, rows, cols, X, n_tokens, 0, rows);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const std::vector<float> x(X.begin() + t * cols, X.begin() + (t + 1) * cols);
        const std::vector<float> alone = amx_product(type, W, tiles, rows, cols, x, 1, 0, rows);
        ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + t * rows, 4 * rows)) << "token " << t;
    }
}

// Through matmul() on the amx path (the dispatch, the thread split into whole 32-row tiles): 1-3 threads.
TEST_P(GemmAmx, ThroughMatmulWithOneToThreeThreads) {
    SKIP_WITHOUT_AMX();
    if (!avx512_uses_amx()) GTEST_SKIP() << "SKIPPED: KVSTASH_ISA=" << isa_env() << " is not amx";
    const TensorType type = GetParam();
    ThreadPool two(2), three(3);
    for (const Shape s : kShapes) {
        const std::vector<uint8_t> W = test::random_weights(type, s.rows, s.cols, 43);
        const std::vector<uint8_t> tiles = repacked(type, W, s.rows, s.cols);
        for (const int64_t n_tokens : {1, 3, 9, 16, 17, 40, 64}) {
            const std::vector<float> X = test::edge_activations(n_tokens, s.cols, 47);
            const std::vector<float> want = scalar_product(type, W, s.rows, s.cols, X, n_tokens);
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two, &three}) {
                std::vector<float> got(want.size());
                matmul(type, W.data(), s.rows, s.cols, X.data(), n_tokens, got.data(), pool, tiles.data());
                expect_same_bits(got, want, s.rows,
                                 std::to_string(n_tokens) + " tokens, " +
                                     std::to_string(pool != nullptr ? pool->n_threads() : 1) + " threads");
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, GemmAmx, ::testing::Values(TensorType::Q8_0, TensorType::Q4_K), type_name);

// ---- whole models: the amx path's logits against the scalar path's, bitwise ----

// q8_0 layers (gemma3_tiny's q5_0: repacked to q8_0 at load on this path) and q4_K ones.
const char* const kModels[] = {"qwen2/qwen2_q8_0.gguf", "gpt2/gpt2_q8_0.gguf", "gemma3_tiny/gemma3_tiny_q5_0.gguf",
                               "tiny/q_q4_k.gguf"};

std::vector<float> prompt_logits(const std::string& file, int n_threads) {
    const auto model = Model::load(test::fixture_path(file));
    const std::vector<int32_t> tokens = test::pseudo_random_tokens(40, model->n_vocab(), 7);
    return test::eval_logits(model, tokens, {40}, n_threads);
}

// A helper run in a child by the next test: writes this path's prompt logits of each model to
// $KVSTASH_AMX_LOGITS_OUT.<index>.
TEST(AmxModel, WritesThisPathsLogitsChild) {
    const char* out = std::getenv("KVSTASH_AMX_LOGITS_OUT");
    if (out == nullptr) GTEST_SKIP() << "a child of AmxModel.PromptLogitsEqualTheScalarPath";
    for (size_t i = 0; i < std::size(kModels); ++i) {
        const std::vector<float> logits = prompt_logits(kModels[i], 1);
        std::ofstream f(std::string(out) + "." + std::to_string(i), std::ios::binary);
        f.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(4 * logits.size()));
        ASSERT_TRUE(f.good());
    }
}

TEST(AmxModel, PromptLogitsEqualTheScalarPath) {
    SKIP_WITHOUT_AMX();
    if (!avx512_uses_amx()) GTEST_SKIP() << "SKIPPED: KVSTASH_ISA=" << isa_env() << " is not amx";
    const std::string out = ::testing::TempDir() + "amx_scalar_logits_" + std::to_string(getpid());
    const std::string run = "KVSTASH_ISA=scalar KVSTASH_AMX_LOGITS_OUT='" + out + "' " + test::self_command() +
                            " --gtest_filter=AmxModel.WritesThisPathsLogitsChild";
    ASSERT_EQ(test::run_child(run), 0) << run;
    for (size_t i = 0; i < std::size(kModels); ++i) {
        SCOPED_TRACE(kModels[i]);
        const std::string path = out + "." + std::to_string(i);
        std::ifstream f(path, std::ios::binary);
        const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        std::remove(path.c_str());
        for (const int n_threads : {1, 3}) {
            const std::vector<float> amx = prompt_logits(kModels[i], n_threads);
            ASSERT_EQ(bytes.size(), 4 * amx.size());
            EXPECT_EQ(0, std::memcmp(bytes.data(), amx.data(), bytes.size())) << n_threads << " threads";
        }
    }
}

}  // namespace
}  // namespace kvstash
