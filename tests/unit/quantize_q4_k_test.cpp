// q4_K quantization (format/quantize.h quantize_row_q4_K, used by `--quantize q4_K` on model directories):
// bitwise ggml's quantize_row_q4_K_ref on the fixture rows (tests/reference/make_q4_k_quantize_fixture.py
// calls ggml's own function), decodes back to within the format's resolution, and refuses partial blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/quantize.h"
#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "support/paths.h"

namespace kvstash {
namespace {

constexpr uint64_t kBlockBytes = 144;

std::vector<uint8_t> from_hex(const std::string& hex) {
    std::vector<uint8_t> out(hex.size() / 2);
    for (size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    return out;
}

struct Fixture {
    int64_t row = 0;
    std::vector<float> values;
    std::vector<uint8_t> blocks;
};

Fixture load_fixture() {
    std::ifstream in(test::fixture_path("quant/q4_k_quantize_rows.json"));
    EXPECT_TRUE(in) << "missing fixture; run tests/reference/make_q4_k_quantize_fixture.py";
    const nlohmann::json doc = nlohmann::json::parse(in);
    Fixture f;
    f.row = doc.at("row_values").get<int64_t>();
    const std::vector<uint8_t> value_bytes = from_hex(doc.at("values_hex").get<std::string>());
    f.values.resize(value_bytes.size() / 4);
    std::memcpy(f.values.data(), value_bytes.data(), value_bytes.size());
    f.blocks = from_hex(doc.at("blocks_hex").get<std::string>());
    return f;
}

TEST(QuantizeQ4K, MatchesGgmlBytes) {
    const Fixture f = load_fixture();
    const auto n_rows = static_cast<int64_t>(f.values.size()) / f.row;
    const uint64_t row_bytes = tensor_row_bytes(TensorType::Q4_K, f.row);
    ASSERT_EQ(row_bytes, static_cast<uint64_t>(f.row) / 256 * kBlockBytes);
    ASSERT_EQ(f.blocks.size(), static_cast<size_t>(n_rows) * row_bytes);
    std::vector<uint8_t> got(f.blocks.size());
    for (int64_t r = 0; r < n_rows; ++r) {
        quantize_row_q4_K(f.values.data() + r * f.row, got.data() + static_cast<uint64_t>(r) * row_bytes, f.row);
    }
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(f.blocks[i], got[i]) << "row " << i / row_bytes << ", super-block " << (i % row_bytes) / kBlockBytes
                                       << ", byte " << i % kBlockBytes;
    }
}

TEST(QuantizeQ4K, DecodesWithinTheSubBlockResolution) {
    const Fixture f = load_fixture();
    const int64_t n = f.row;
    std::vector<uint8_t> block(tensor_row_bytes(TensorType::Q4_K, n));
    std::vector<float> back(static_cast<size_t>(n));
    for (size_t r = 0; r < f.values.size() / static_cast<size_t>(n); ++r) {
        const float* x = f.values.data() + r * static_cast<size_t>(n);
        quantize_row_q4_K(x, block.data(), n);
        dequantize_row(TensorType::Q4_K, block.data(), back.data(), n);
        for (int64_t s = 0; s < n; s += 32) {
            // 16 levels over the sub-block's range (with 0 in it), plus the 6-bit rounding of its scale and min
            // against the super-block's d and dmin: at most 15 × d / 2 and dmin / 2.
            const uint8_t* header = block.data() + static_cast<size_t>(s / 256) * kBlockBytes;
            uint16_t d16 = 0, dmin16 = 0;
            std::memcpy(&d16, header, 2);
            std::memcpy(&dmin16, header + 2, 2);
            float lo = 0.0f, hi = 0.0f;
            for (int64_t i = s; i < s + 32; ++i) lo = std::fmin(lo, x[i]), hi = std::fmax(hi, x[i]);
            const float tolerance = (hi - lo) / 15.0f + 8.0f * fp16_to_fp32(d16) + fp16_to_fp32(dmin16) +
                                    1e-6f * std::fmax(std::fabs(lo), std::fabs(hi));
            for (int64_t i = s; i < s + 32; ++i) {
                ASSERT_NEAR(back[static_cast<size_t>(i)], x[i], tolerance) << "row " << r << ", value " << i;
            }
        }
    }
}

TEST(QuantizeQ4K, RefusesAPartialSuperBlock) {
    std::vector<float> x(288, 1.0f);
    std::vector<uint8_t> out(2 * kBlockBytes);
    EXPECT_THROW(quantize_row_q4_K(x.data(), out.data(), 288), Error);
}

}  // namespace
}  // namespace kvstash
