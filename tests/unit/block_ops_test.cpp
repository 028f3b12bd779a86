// The data-driven pieces of a transformer layer: bias rows (backends/cpu/matmul/project.h), the norm kind
// (backends/cpu/norm/norm_rows.h), the position-table bounds check that model_forward runs before writing
// anything (model/config.h).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/cpu/matmul/project.h"
#include "backends/cpu/norm/layer_norm.h"
#include "backends/cpu/norm/norm.h"
#include "backends/cpu/norm/norm_rows.h"
#include "kvstash/error.h"
#include "model/config.h"

namespace kvstash {
namespace {

TEST(BlockOps, AddBiasRowsAddsToEveryRowAndIgnoresAnEmptyBias) {
    std::vector<float> y = {1, 2, 3, 4, 5, 6};
    add_bias_rows(y.data(), {}, 2);
    EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4, 5, 6}));
    add_bias_rows(y.data(), {0.5f, -1.0f, 2.0f}, 2);
    EXPECT_EQ(y, (std::vector<float>{1.5f, 1, 5, 4.5f, 4, 8}));
}

TEST(BlockOps, NormRowsFollowsTheConfigsNormKind) {
    ModelConfig c;
    c.n_embd = 5;
    c.norm_eps = 1e-5f;
    const std::vector<float> x = {1, -2, 3, 0.5f, 7, 2, 2, -1, 0, 4};
    const std::vector<float> w = {1, 0.5f, 2, 1, 1}, b = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
    std::vector<float> got(10), want(10);
    c.norm = NormKind::rms;
    norm_rows(c, x.data(), w, {}, got.data(), 2);
    for (int r = 0; r < 2; ++r) rms_norm_row(x.data() + 5 * r, w.data(), want.data() + 5 * r, 5, c.norm_eps);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * 10));
    c.norm = NormKind::layer;
    norm_rows(c, x.data(), w, b, got.data(), 2);
    for (int r = 0; r < 2; ++r) {
        layer_norm_row(x.data() + 5 * r, w.data(), b.data(), want.data() + 5 * r, 5, c.norm_eps);
    }
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * 10));
}

TEST(BlockOps, LearnedPositionsAreBoundedByTheTable) {
    ModelConfig c;
    c.n_ctx_train = 64;
    EXPECT_NO_THROW(check_positions(c, 1000, 10));  // RoPE models: no table
    c.learned_positions = true;
    EXPECT_NO_THROW(check_positions(c, 0, 64));
    EXPECT_NO_THROW(check_positions(c, 63, 1));
    try {
        check_positions(c, 60, 5);
        ADD_FAILURE() << "position 64 was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::out_of_range);
        EXPECT_NE(std::string(e.what()).find("position 64"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("64 positions"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace kvstash
