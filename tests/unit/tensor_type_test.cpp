// Tensor type traits and the reference dequantizer, against fixtures made by gguf-py
// (tests/reference/make_quant_fixtures.py, which records the gguf version in each file). Dequantization
// is exact arithmetic on the same fp32 operations as gguf-py / ggml, so the comparison is bitwise
// (NaNs included: their payloads must survive as numpy keeps them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "support/paths.h"

namespace kvstash {
namespace {

std::vector<uint8_t> from_hex(const std::string& hex) {
    std::vector<uint8_t> out(hex.size() / 2);
    for (size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    return out;
}

uint32_t bits_of(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

float float_of(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

struct Fixture {
    TensorType type;
    const char* file;
};

class DequantizeFixture : public ::testing::TestWithParam<Fixture> {};

TEST_P(DequantizeFixture, MatchesGgufPyBitwise) {
    const Fixture& fx = GetParam();
    std::ifstream in(test::fixture_path(std::string("quant/") + fx.file));
    ASSERT_TRUE(in) << "missing fixture " << fx.file << "; run tests/reference/make_quant_fixtures.py";
    const nlohmann::json doc = nlohmann::json::parse(in);
    const TensorTypeTraits& traits = tensor_type_traits(fx.type);
    ASSERT_EQ(doc.at("ggml_type").get<uint32_t>(), static_cast<uint32_t>(fx.type));
    ASSERT_EQ(doc.at("block_size").get<uint32_t>(), traits.block_size);
    ASSERT_EQ(doc.at("type_size").get<uint32_t>(), traits.type_size);

    const std::vector<uint8_t> blocks = from_hex(doc.at("blocks_hex").get<std::string>());
    const std::vector<uint8_t> expected_bytes = from_hex(doc.at("expected_f32_hex").get<std::string>());
    ASSERT_EQ(blocks.size() % traits.type_size, 0u);
    const int64_t n = static_cast<int64_t>(blocks.size() / traits.type_size * traits.block_size);
    ASSERT_EQ(expected_bytes.size(), static_cast<size_t>(n) * 4);
    ASSERT_EQ(tensor_row_bytes(fx.type, n), blocks.size());

    std::vector<float> got(static_cast<size_t>(n));
    dequantize_row(fx.type, blocks.data(), got.data(), n);
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
        uint32_t want;
        std::memcpy(&want, expected_bytes.data() + 4 * i, 4);
        const uint32_t have = bits_of(got[static_cast<size_t>(i)]);
        if (have != want && ++mismatches <= 10) {
            ADD_FAILURE() << traits.name << " element " << i << " (block " << i / traits.block_size << "): got "
                          << got[static_cast<size_t>(i)] << " (0x" << std::hex << have << "), gguf-py "
                          << float_of(want) << " (0x" << want << std::dec << ")";
        }
    }
    EXPECT_EQ(mismatches, 0);

    // Decoding block by block gives the same values as decoding the whole row.
    for (int64_t b = 0; b < n / traits.block_size; ++b) {
        std::vector<float> one(traits.block_size);
        dequantize_row(fx.type, blocks.data() + b * traits.type_size, one.data(), traits.block_size);
        EXPECT_EQ(0, std::memcmp(one.data(), got.data() + b * traits.block_size, 4 * one.size())) << "block " << b;
    }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, DequantizeFixture,
    ::testing::Values(Fixture{TensorType::F32, "f32.json"}, Fixture{TensorType::F16, "f16.json"},
                      Fixture{TensorType::BF16, "bf16.json"}, Fixture{TensorType::Q4_0, "q4_0.json"},
                      Fixture{TensorType::Q4_1, "q4_1.json"}, Fixture{TensorType::Q8_0, "q8_0.json"},
                      Fixture{TensorType::Q4_K, "q4_k.json"}, Fixture{TensorType::Q5_K, "q5_k.json"},
                      Fixture{TensorType::Q6_K, "q6_k.json"}),
    [](const ::testing::TestParamInfo<Fixture>& info) {
        return std::string(tensor_type_traits(info.param.type).name);
    });

TEST(TensorType, TraitsMatchGgml) {
    // (type, name, block size, bytes per block) as in ggml.c type_traits.
    struct Row {
        TensorType type;
        const char* name;
        uint32_t block_size, type_size;
    };
    const Row rows[] = {
        {TensorType::F32, "f32", 1, 4},       {TensorType::F16, "f16", 1, 2},
        {TensorType::BF16, "bf16", 1, 2},     {TensorType::Q4_0, "q4_0", 32, 18},
        {TensorType::Q4_1, "q4_1", 32, 20},   {TensorType::Q8_0, "q8_0", 32, 34},
        {TensorType::Q4_K, "q4_K", 256, 144}, {TensorType::Q5_K, "q5_K", 256, 176},
        {TensorType::Q6_K, "q6_K", 256, 210}, {kTensorTypeQ5_0, "q5_0", 32, 22},
    };
    for (const Row& r : rows) {
        const TensorTypeTraits& t = tensor_type_traits(r.type);
        EXPECT_STREQ(t.name, r.name);
        EXPECT_EQ(t.block_size, r.block_size) << r.name;
        EXPECT_EQ(t.type_size, r.type_size) << r.name;
        EXPECT_TRUE(is_readable_tensor_type(static_cast<uint32_t>(r.type))) << r.name;
        EXPECT_EQ(is_supported_tensor_type(static_cast<uint32_t>(r.type)), r.type != kTensorTypeQ5_0) << r.name;
        EXPECT_EQ(tensor_type_name(static_cast<uint32_t>(r.type)), r.name);
    }
}

TEST(TensorType, NamesUnsupportedTypes) {
    const std::pair<uint32_t, const char*> names[] = {
        {6, "q5_0"},     {7, "q5_1"},    {9, "q8_1"},     {10, "q2_K"},  {11, "q3_K"},   {15, "q8_K"},
        {16, "iq2_xxs"}, {17, "iq2_xs"}, {18, "iq3_xxs"}, {19, "iq1_s"}, {20, "iq4_nl"}, {21, "iq3_s"},
        {22, "iq2_s"},   {23, "iq4_xs"}, {24, "i8"},      {25, "i16"},   {26, "i32"},    {27, "i64"},
        {28, "f64"},     {29, "iq1_m"},  {34, "tq1_0"},   {35, "tq2_0"}, {39, "mxfp4"},
    };
    for (const auto& [raw, name] : names) {
        EXPECT_EQ(tensor_type_name(raw), name);
        EXPECT_FALSE(is_supported_tensor_type(raw)) << name;
    }
    EXPECT_EQ(tensor_type_name(77), "type 77");
    EXPECT_EQ(tensor_type_name(0xFFFFFFFFu), "type 4294967295");
    EXPECT_FALSE(is_supported_tensor_type(77));
    EXPECT_THROW(tensor_type_traits(static_cast<TensorType>(7)), Error);
}

// q5_0 (read at load, repacked to q8_0): x = d * ((nibble | fifth bit << 4) - 16), element j from the low nibble of
// byte j and bit j of qh, element j + 16 from the high nibble and bit j + 16.
TEST(TensorType, DequantizesQ5_0) {
    uint8_t block[22] = {};
    const uint16_t d = fp32_to_fp16(0.5f);
    std::memcpy(block, &d, 2);
    const uint32_t qh = 0x80000001u;  // fifth bit of elements 0 and 31
    std::memcpy(block + 2, &qh, 4);
    for (int j = 0; j < 16; ++j) block[6 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    float out[32];
    dequantize_row(kTensorTypeQ5_0, block, out, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[j], 0.5f * static_cast<float>((j | (j == 0 ? 16 : 0)) - 16)) << j;
        EXPECT_EQ(out[j + 16], 0.5f * static_cast<float>(((15 - j) | (j == 15 ? 16 : 0)) - 16)) << j + 16;
    }
}

TEST(TensorType, RowBytes) {
    EXPECT_EQ(tensor_row_bytes(TensorType::Q4_1, 576), 18u * 20u);
    EXPECT_EQ(tensor_row_bytes(TensorType::Q6_K, 512), 2u * 210u);
    EXPECT_EQ(tensor_row_bytes(TensorType::F32, 7), 28u);
    EXPECT_EQ(tensor_row_bytes(TensorType::Q8_0, 0), 0u);
    try {
        tensor_row_bytes(TensorType::Q4_K, 576);
        FAIL() << "576 is not a multiple of 256";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::bad_format);
    }
    std::vector<float> out(40);
    const std::vector<uint8_t> in(40 * 20);
    EXPECT_THROW(dequantize_row(TensorType::Q4_1, in.data(), out.data(), 40), Error);
}

// fp16 -> fp32 against the value the bits denote, computed independently with ldexp.
TEST(TensorType, Fp16ToFp32AllValues) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float got = fp16_to_fp32(static_cast<uint16_t>(h));
        const int exponent = (h >> 10) & 0x1F;
        const int mantissa = h & 0x3FF;
        const double sign = (h & 0x8000) ? -1.0 : 1.0;
        if (exponent == 0x1F) {
            if (mantissa == 0) {
                EXPECT_TRUE(std::isinf(got) && std::signbit(got) == bool(h & 0x8000)) << h;
            } else {  // NaN keeps sign and payload, shifted into the fp32 mantissa
                EXPECT_EQ(bits_of(got), ((h & 0x8000u) << 16) | 0x7F800000u | (uint32_t(mantissa) << 13)) << h;
            }
            continue;
        }
        const double want =
            exponent == 0 ? sign * std::ldexp(mantissa, -24) : sign * std::ldexp(1024 + mantissa, exponent - 25);
        ASSERT_EQ(got, static_cast<float>(want)) << "half 0x" << std::hex << h;
        ASSERT_EQ(std::signbit(got), bool(h & 0x8000)) << h;
    }
}

// fp32 -> fp16: exact values round-trip; midpoints round to even; overflow goes to inf.
TEST(TensorType, Fp32ToFp16RoundsToNearestEven) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = fp16_to_fp32(static_cast<uint16_t>(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
            continue;
        }
        ASSERT_EQ(fp32_to_fp16(f), h) << "round trip of half 0x" << std::hex << h;
        // The midpoint to the next half up (same sign) rounds to whichever of the two is even.
        const uint32_t next = h + 1;
        if ((h & 0x7FFF) >= 0x7C00 || (next & 0x7FFF) > 0x7C00) continue;
        const double mid = (double(f) + double(fp16_to_fp32(static_cast<uint16_t>(next)))) / 2;
        if ((next & 0x7FFF) == 0x7C00) {
            EXPECT_EQ(fp32_to_fp16(static_cast<float>(mid)), next) << "65520 rounds to inf";
            continue;
        }
        ASSERT_EQ(static_cast<double>(static_cast<float>(mid)), mid);  // every fp16 midpoint is an fp32
        ASSERT_EQ(fp32_to_fp16(static_cast<float>(mid)), (h & 1) ? next : h) << "midpoint above 0x" << std::hex << h;
        // Just above / below the midpoint.
        ASSERT_EQ(fp32_to_fp16(std::nextafter(static_cast<float>(mid), (h & 0x8000) ? -1e9f : 1e9f)), next) << h;
        ASSERT_EQ(fp32_to_fp16(std::nextafter(static_cast<float>(mid), 0.0f)), h) << h;
    }
    EXPECT_EQ(fp32_to_fp16(1e6f), 0x7C00);
    EXPECT_EQ(fp32_to_fp16(-1e6f), 0xFC00);
    EXPECT_EQ(fp32_to_fp16(1e-9f), 0x0000);
    EXPECT_EQ(fp32_to_fp16(-1e-9f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);                        // tie to even (0)
    EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);  // above the tie
}

TEST(TensorType, Bf16ToFp32) {
    EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
    EXPECT_EQ(bf16_to_fp32(0xC000), -2.0f);
    EXPECT_EQ(bits_of(bf16_to_fp32(0x8000)), 0x80000000u);
    EXPECT_TRUE(std::isinf(bf16_to_fp32(0x7F80)));
}

}  // namespace
}  // namespace kvstash
