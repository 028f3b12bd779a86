// The safetensors reader on well-formed and malformed headers: every check in src/format/safetensors.cpp has a
// file here that trips it, and each must raise kvstash::Error with the right code (never crash or read outside).
#include "format/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kvstash/error.h"

namespace kvstash {
namespace {

// 8-byte little-endian header length, the header, then `data_bytes` bytes of data.
std::vector<uint8_t> file_with(const std::string& header, size_t data_bytes, uint64_t header_len_override = 0) {
    const uint64_t n = header_len_override ? header_len_override : header.size();
    std::string bytes;
    for (int i = 0; i < 8; ++i) bytes += static_cast<char>(static_cast<uint8_t>(n >> (8 * i)));
    bytes += header;
    for (size_t i = 0; i < data_bytes; ++i) bytes += static_cast<char>(i);
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

std::optional<ErrorCode> code_of(const std::vector<uint8_t>& bytes, std::string* message = nullptr) {
    try {
        safetensors::File::parse(bytes.data(), bytes.size(), "test.safetensors");
    } catch (const Error& e) {
        if (message) *message = e.what();
        return e.code();
    }
    return std::nullopt;
}

TEST(Safetensors, ReadsTensorsAndMetadata) {
    const std::string header =
        R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F16","shape":[2],"data_offsets":[24,28]},)"
        R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"e":{"dtype":"BF16","shape":[0],"data_offsets":[28,28]}})";
    const auto bytes = file_with(header, 28);
    auto f = safetensors::File::parse(bytes.data(), bytes.size(), "t");
    ASSERT_EQ(f->tensors().size(), 3u);
    const auto* a = f->find_tensor("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->type, TensorType::F32);
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a->n_elements(), 6);
    EXPECT_EQ(f->tensor_data(*a), bytes.data() + 8 + header.size());
    EXPECT_EQ(f->find_tensor("b")->type, TensorType::F16);
    EXPECT_EQ(f->find_tensor("e")->n_bytes, 0u);
    EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(Safetensors, RefusesMalformedHeaders) {
    const std::string ok_tensor = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    struct Case {
        const char* what;
        std::vector<uint8_t> bytes;
    };
    const std::vector<Case> cases = {
        {"shorter than the length", {1, 2, 3}},
        {"header past the end", file_with("{" + ok_tensor + "}", 8, 1000)},
        {"header length huge", file_with("{" + ok_tensor + "}", 8, uint64_t{1} << 62)},
        {"header length 2^64 - 1", file_with("{}", 0, 0xFFFFFFFFFFFFFFFFull)},
        {"not JSON", file_with("{not json", 0)},
        {"not an object", file_with("[1, 2]", 0)},
        {"deep nesting", file_with("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}", 0)},
        {"no dtype", file_with(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8)},
        {"unknown dtype", file_with(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8)},
        {"negative dim", file_with(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)},
        {"fractional dim", file_with(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8)},
        {"too many dims", file_with(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4)},
        {"count overflow",
         file_with(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8)},
        {"byte overflow", file_with(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8)},
        {"begin > end", file_with(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8)},
        {"end past data", file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 7)},
        {"offset huge", file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})", 8)},
        {"size mismatch", file_with(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 12)},
        {"one offset", file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8)},
        {"overlap", file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              12)},
        {"metadata not strings", file_with(R"({"__metadata__":{"x":1}})", 0)},
        {"tensor not object", file_with(R"({"a":5})", 0)},
    };
    for (const Case& c : cases) {
        std::string message;
        EXPECT_EQ(code_of(c.bytes, &message), ErrorCode::bad_format) << c.what << ": " << message;
    }
}

TEST(Safetensors, RefusesUnsupportedDtypesNamingTheTensor) {
    std::string message;
    const auto bytes = file_with(R"({"w.q":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4);
    EXPECT_EQ(code_of(bytes, &message), ErrorCode::unsupported);
    EXPECT_NE(message.find("w.q"), std::string::npos) << message;
    EXPECT_NE(message.find("I8"), std::string::npos) << message;
}

}  // namespace
}  // namespace kvstash
