// gguf::File: metadata of every type round-trips through GgufBuilder, tensor infos and data pointers are
// right, every class of malformed file raises kvstash::Error (never a crash or out-of-bounds read: run
// under -DKVSTASH_SANITIZE=ON), and the real default model reads as the `gguf` Python package reads it.
#include "format/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "kvstash/error.h"
#include "support/gguf_builder.h"
#include "support/paths.h"

namespace kvstash::gguf {
namespace {

using test::ByteWriter;
using test::GgufBuilder;
namespace gv = test::gv;

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kIq2Xxs = 16;

std::unique_ptr<File> parse_bytes(const std::vector<uint8_t>& bytes) {
    return File::parse(bytes.data(), bytes.size(), "test.gguf");
}

// Parses `bytes` expecting an Error with `code` whose message contains `needle`.
void expect_error(const std::vector<uint8_t>& bytes, ErrorCode code, const std::string& needle) {
    try {
        parse_bytes(bytes);
        ADD_FAILURE() << "parsed without error; expected one containing \"" << needle << "\"";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
            << "message \"" << e.what() << "\" lacks \"" << needle << "\"";
        EXPECT_EQ(std::string(e.what()).rfind("test.gguf: ", 0), 0u) << "message should name the file: " << e.what();
    }
}

// Bitwise equality of two values (NaN-safe for floats).
void expect_same_value(const Value& expected, const Value& actual, const std::string& where) {
    ASSERT_EQ(expected.type, actual.type) << where;
    switch (expected.type) {
        case ValueType::FLOAT32:
        case ValueType::FLOAT64:
            EXPECT_EQ(std::bit_cast<uint64_t>(expected.real), std::bit_cast<uint64_t>(actual.real)) << where;
            break;
        case ValueType::STRING: EXPECT_EQ(expected.string, actual.string) << where; break;
        case ValueType::ARRAY:
            ASSERT_EQ(expected.array_type, actual.array_type) << where;
            ASSERT_EQ(expected.array.size(), actual.array.size()) << where;
            for (size_t i = 0; i < expected.array.size(); ++i) {
                expect_same_value(expected.array[i], actual.array[i], where + "[" + std::to_string(i) + "]");
            }
            break;
        default:
            EXPECT_EQ(expected.integer, actual.integer) << where;
            EXPECT_EQ(expected.uinteger, actual.uinteger) << where;
    }
}

// One entry of every value type, including extremes, empty and nested arrays.
std::vector<std::pair<std::string, Value>> every_type_metadata() {
    using VT = ValueType;
    return {
        {"t.u8", gv::u8(255)},
        {"t.i8", gv::i8(-128)},
        {"t.u16", gv::u16(65535)},
        {"t.i16", gv::i16(-32768)},
        {"t.u32", gv::u32(4000000000u)},
        {"t.i32", gv::i32(-2000000000)},
        {"t.f32", gv::f32(-1.5e-3f)},
        {"t.bool_true", gv::boolean(true)},
        {"t.bool_false", gv::boolean(false)},
        {"t.string", gv::string("héllo wörld")},
        {"t.string_empty", gv::string("")},
        {"t.string_nul", gv::string(std::string("a\0b", 3))},
        {"t.u64", gv::u64(std::numeric_limits<uint64_t>::max())},
        {"t.i64", gv::i64(std::numeric_limits<int64_t>::min())},
        {"t.f64", gv::f64(3.141592653589793)},
        {"t.f32_nan", gv::f32(std::numeric_limits<float>::quiet_NaN())},
        {"t.array_i32", gv::array(VT::INT32, {gv::i32(1), gv::i32(-2), gv::i32(3)})},
        {"t.array_f32", gv::array(VT::FLOAT32, {gv::f32(0.5f), gv::f32(-0.25f)})},
        {"t.array_bool", gv::array(VT::BOOL, {gv::boolean(true), gv::boolean(false)})},
        {"t.array_u64", gv::array(VT::UINT64, {gv::u64(1), gv::u64(uint64_t{1} << 63)})},
        {"t.array_empty", gv::array(VT::UINT8, {})},
        {"t.array_strings", gv::string_array({"<s>", "", "▁the"})},
        {"t.array_nested", gv::array(VT::ARRAY, {gv::array(VT::INT16, {gv::i16(7)}), gv::string_array({"x", "y"})})},
    };
}

std::vector<uint8_t> q8_0_block_bytes(uint8_t fill) {
    return std::vector<uint8_t>(34, fill);  // q8_0: 32 elements in 34 bytes (f16 scale + 32 int8)
}

// A valid file with metadata of every type and three tensors (f32, q8_0, f32).
std::vector<uint8_t> rich_file() {
    GgufBuilder b;
    for (auto& [key, value] : every_type_metadata()) b.add(key, value);
    b.add_f32_tensor("a", {3}, {1.0f, 2.0f, 3.0f});
    b.add_tensor("b", kQ8_0, {32, 2}, [] {
        std::vector<uint8_t> d = q8_0_block_bytes(0x11);
        std::vector<uint8_t> second = q8_0_block_bytes(0x22);
        d.insert(d.end(), second.begin(), second.end());
        return d;
    }());
    b.add_f32_tensor("c", {2, 1, 1, 2}, {5, 6, 7, 8});
    return b.build();
}

TEST(Gguf, MetadataOfEveryTypeRoundTrips) {
    const auto expected = every_type_metadata();
    for (uint32_t version : {2u, 3u}) {
        GgufBuilder b;
        b.set_version(version);
        for (auto& [key, value] : expected) b.add(key, value);
        const auto bytes = b.build();
        auto file = parse_bytes(bytes);
        EXPECT_EQ(file->version(), version);
        EXPECT_EQ(file->alignment(), 32u);
        EXPECT_TRUE(file->tensors().empty());
        ASSERT_EQ(file->metadata().size(), expected.size());
        for (size_t i = 0; i < expected.size(); ++i) {
            EXPECT_EQ(file->metadata()[i].first, expected[i].first);
            expect_same_value(expected[i].second, file->metadata()[i].second, expected[i].first);
            ASSERT_NE(file->find(expected[i].first), nullptr);
        }
        EXPECT_EQ(file->find("t.missing"), nullptr);
    }
}

TEST(Gguf, TypedAccessors) {
    const auto bytes = rich_file();
    auto file = parse_bytes(bytes);
    EXPECT_EQ(file->get_int("t.i8"), -128);
    EXPECT_EQ(file->get_int("t.u32"), 4000000000);
    EXPECT_EQ(file->require_int("t.i64"), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(file->get_float("t.f64"), 3.141592653589793);
    EXPECT_EQ(file->get_float("t.f32"), static_cast<double>(-1.5e-3f));
    EXPECT_EQ(file->require_float("t.u16"), 65535.0);  // integers are accepted as floats
    EXPECT_EQ(file->get_string("t.string"), "héllo wörld");
    EXPECT_EQ(file->require_string("t.string_nul"), std::string("a\0b", 3));
    EXPECT_EQ(file->get_bool("t.bool_true"), true);
    EXPECT_EQ(file->get_bool("t.bool_false"), false);
    EXPECT_EQ(file->get_int("t.missing"), std::nullopt);
    EXPECT_EQ(file->get_string("t.missing"), std::nullopt);
    const std::vector<Value>* tokens = file->get_array("t.array_strings", ValueType::STRING);
    ASSERT_NE(tokens, nullptr);
    ASSERT_EQ(tokens->size(), 3u);
    EXPECT_EQ((*tokens)[2].string, "▁the");
    EXPECT_EQ(file->get_array("t.missing", ValueType::STRING), nullptr);

    auto expect_key_error = [](auto&& call, const std::string& needle) {
        try {
            call();
            ADD_FAILURE() << "no error; expected one containing " << needle;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::bad_format);
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_key_error([&] { file->get_int("t.string"); }, "'t.string' has type string, expected an integer");
    expect_key_error([&] { file->get_int("t.bool_true"); }, "'t.bool_true' has type bool");
    expect_key_error([&] { file->get_int("t.u64"); }, "does not fit in int64");
    expect_key_error([&] { file->get_string("t.u8"); }, "'t.u8' has type uint8, expected string");
    expect_key_error([&] { file->get_bool("t.u8"); }, "expected bool");
    expect_key_error([&] { file->get_float("t.array_f32"); }, "has type array");
    expect_key_error([&] { file->require_int("llama.block_count"); }, "'llama.block_count' is missing");
    expect_key_error([&] { file->require_string("general.name"); }, "'general.name' is missing");
    expect_key_error([&] { file->get_array("t.array_i32", ValueType::STRING); },
                     "has type array of int32, expected array of string");
}

TEST(Gguf, TensorInfosAndDataPointers) {
    const auto bytes = rich_file();
    auto file = parse_bytes(bytes);
    ASSERT_EQ(file->tensors().size(), 3u);
    EXPECT_EQ(file->data_offset() % 32, 0u);
    EXPECT_EQ(file->bytes(), bytes.data());
    EXPECT_EQ(file->size(), bytes.size());

    const TensorInfo* a = file->find_tensor("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->dims, (std::vector<int64_t>{3}));
    EXPECT_EQ(a->type, TensorType::F32);
    EXPECT_EQ(a->n_elements(), 3);
    EXPECT_EQ(a->n_bytes, 12u);
    EXPECT_EQ(a->offset, 0u);
    float a_values[3];
    std::memcpy(a_values, file->tensor_data(*a), sizeof a_values);
    EXPECT_EQ(a_values[0], 1.0f);
    EXPECT_EQ(a_values[2], 3.0f);

    const TensorInfo* b = file->find_tensor("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->type, TensorType::Q8_0);
    EXPECT_EQ(b->raw_type, kQ8_0);
    EXPECT_EQ(b->dims, (std::vector<int64_t>{32, 2}));
    EXPECT_EQ(b->n_elements(), 64);
    EXPECT_EQ(b->n_bytes, 68u);
    EXPECT_EQ(b->offset, 32u);  // after a's 12 bytes, aligned to 32
    EXPECT_EQ(file->tensor_data(*b), bytes.data() + file->data_offset() + 32);
    EXPECT_EQ(file->tensor_data(*b)[0], 0x11);
    EXPECT_EQ(file->tensor_data(*b)[67], 0x22);

    const TensorInfo* c = file->find_tensor("c");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->dims, (std::vector<int64_t>{2, 1, 1, 2}));
    EXPECT_EQ(c->n_bytes, 16u);
    EXPECT_EQ(c->offset, 128u);  // b ends at 100
    EXPECT_EQ(file->find_tensor("d"), nullptr);
    EXPECT_EQ(file->tensors()[1].name, "b");  // file order
}

TEST(Gguf, CustomAlignment) {
    GgufBuilder b;
    b.add("general.alignment", gv::u32(256));
    b.add_f32_tensor("x", {1}, {1});
    b.add_f32_tensor("y", {1}, {2});
    const auto bytes = b.build();
    auto file = parse_bytes(bytes);
    EXPECT_EQ(file->alignment(), 256u);
    EXPECT_EQ(file->data_offset(), 256u);
    EXPECT_EQ(file->find_tensor("y")->offset, 256u);

    expect_error(GgufBuilder().add("general.alignment", gv::u32(48)).build(), ErrorCode::bad_format,
                 "alignment 48 is not a power of two");
    expect_error(GgufBuilder().add("general.alignment", gv::u32(0)).build(), ErrorCode::bad_format,
                 "alignment 0 is not a power of two");
    expect_error(GgufBuilder().add("general.alignment", gv::u64(32)).build(), ErrorCode::bad_format,
                 "'general.alignment': has type uint64, expected uint32");
}

TEST(Gguf, OpenMapsAFileAndReportsIoErrors) {
    const std::string path = testing::TempDir() + "gguf_test_" + std::to_string(::getpid()) + ".gguf";
    GgufBuilder().add("general.architecture", gv::string("llama")).add_f32_tensor("w", {2}, {4, 5}).write(path);
    {
        auto file = File::open(path);
        EXPECT_EQ(file->path(), path);
        EXPECT_EQ(file->require_string("general.architecture"), "llama");
        float w[2];
        std::memcpy(w, file->tensor_data(*file->find_tensor("w")), sizeof w);
        EXPECT_EQ(w[1], 5.0f);
    }
    std::filesystem::remove(path);

    try {
        File::open(path);
        ADD_FAILURE() << "opened a missing file";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::io);
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
    }
    try {
        File::open(testing::TempDir());
        ADD_FAILURE() << "opened a directory";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::io) << e.what();
    }
    {
        std::FILE* f = std::fopen(path.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        std::fclose(f);
    }
    try {
        File::open(path);
        ADD_FAILURE() << "opened an empty file";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::bad_format);
        EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
    }
    std::filesystem::remove(path);
}

TEST(Gguf, RejectsBadMagicAndVersions) {
    expect_error(GgufBuilder().set_magic("GGML").build(), ErrorCode::bad_format, "not a GGUF file: magic is 'GGML'");
    expect_error(GgufBuilder().set_version(1).build(), ErrorCode::unsupported, "GGUF version 1 is not supported");
    expect_error(GgufBuilder().set_version(0).build(), ErrorCode::bad_format, "invalid GGUF version 0");
    expect_error(GgufBuilder().set_version(4).build(), ErrorCode::unsupported, "GGUF version 4 is newer");
    // A big-endian v3 file: the version reads as 0x03000000 in little-endian.
    expect_error(GgufBuilder().set_version(0x03000000).build(), ErrorCode::unsupported, "big-endian");
    expect_error(GgufBuilder().set_magic("FUGG").build(), ErrorCode::unsupported, "big-endian");
    expect_error({}, ErrorCode::bad_format, "empty");
}

TEST(Gguf, EveryTruncationIsAnErrorNotACrash) {
    const auto bytes = rich_file();
    ASSERT_NO_THROW(parse_bytes(bytes));
    for (size_t n = 0; n < bytes.size(); ++n) {
        // An exact-size copy, so that a read past the end is caught by AddressSanitizer.
        const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
        try {
            parse_bytes(prefix);
            ADD_FAILURE() << "prefix of " << n << " bytes parsed";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::bad_format) << "prefix " << n << ": " << e.what();
        }
    }
}

// The bytes a parse stands for: header, metadata and tensor infos written back from what was parsed. A
// parse that misread anything (a length, a type, a count) writes back different bytes. The reader takes
// any non-zero bool byte as true (the GGUF spec allows only 0 and 1), so bool bytes are listed in
// `bool_at` and compared as zero / non-zero.
struct WrittenBack {
    std::vector<uint8_t> bytes;
    std::vector<size_t> bool_at;
};

void write_value(ByteWriter& w, const Value& value, std::vector<size_t>& bool_at) {
    if (value.type == ValueType::BOOL) bool_at.push_back(w.size());
    if (value.type != ValueType::ARRAY) {
        test::write_gguf_value(w, value);
        return;
    }
    w.u32(static_cast<uint32_t>(value.array_type)).u64(value.array.size());
    for (const Value& element : value.array) write_value(w, element, bool_at);
}

WrittenBack written_back(const File& file) {
    ByteWriter w;
    std::vector<size_t> bool_at;
    w.raw("GGUF", 4).u32(file.version()).u64(file.tensors().size()).u64(file.metadata().size());
    for (const auto& [key, value] : file.metadata()) {
        w.string(key).u32(static_cast<uint32_t>(value.type));
        write_value(w, value, bool_at);
    }
    for (const TensorInfo& t : file.tensors()) {
        w.string(t.name).u32(static_cast<uint32_t>(t.dims.size()));
        for (int64_t d : t.dims) w.u64(static_cast<uint64_t>(d));
        w.u32(t.raw_type).u64(t.offset);
    }
    return {w.bytes(), bool_at};
}

bool same_head(const WrittenBack& head, const std::vector<uint8_t>& bytes) {
    if (head.bytes.size() > bytes.size()) return false;
    std::vector<uint8_t> seen(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(head.bytes.size()));
    for (size_t at : head.bool_at) seen[at] = seen[at] != 0 ? 1 : 0;
    return seen == head.bytes;
}

// What every successful parse of `bytes` must satisfy: the header, metadata and tensor infos are exactly
// the file's bytes, the data section starts at the next aligned offset after them, and every tensor's
// data (its size as its type and dims say) lies inside the file at an aligned offset.
void expect_faithful_parse(const File& file, const std::vector<uint8_t>& bytes, const std::string& where) {
    const WrittenBack head = written_back(file);
    EXPECT_TRUE(same_head(head, bytes)) << where << ": parse differs from the bytes";
    const uint64_t alignment = file.alignment();
    EXPECT_EQ(file.data_offset(), (head.bytes.size() + alignment - 1) / alignment * alignment) << where;
    for (const TensorInfo& t : file.tensors()) {
        EXPECT_EQ(t.offset % alignment, 0u) << where << " tensor " << t.name;
        EXPECT_EQ(t.n_bytes, tensor_row_bytes(t.type, t.dims[0]) * static_cast<uint64_t>(t.n_elements() / t.dims[0]))
            << where << " tensor " << t.name;
        EXPECT_LE(file.data_offset() + t.offset + t.n_bytes, bytes.size()) << where << " tensor " << t.name;
        EXPECT_EQ(file.tensor_data(t), bytes.data() + file.data_offset() + t.offset) << where;
    }
}

// Every byte of a valid file, corrupted three ways: an Error of the parser's own codes naming the file, or
// a parse that is faithful to the corrupted bytes. A corrupted magic is always an error; a corrupted byte of
// tensor data never is, and changes nothing but that byte.
TEST(Gguf, CorruptingAnyByteIsAnErrorOrAFaithfulParse) {
    const auto bytes = rich_file();
    const auto original = parse_bytes(bytes);
    const uint64_t data_offset = original->data_offset();
    size_t errors = 0, parses = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        for (uint8_t flip : {uint8_t{0xff}, uint8_t{0x80}, uint8_t{0x01}}) {
            std::vector<uint8_t> corrupt = bytes;
            corrupt[i] ^= flip;
            const std::string where = "byte " + std::to_string(i) + " ^ " + std::to_string(flip);
            std::unique_ptr<File> file;
            try {
                file = parse_bytes(corrupt);
            } catch (const Error& e) {
                ++errors;
                EXPECT_TRUE(e.code() == ErrorCode::bad_format || e.code() == ErrorCode::unsupported)
                    << where << ": " << e.what();
                EXPECT_EQ(std::string(e.what()).rfind("test.gguf: ", 0), 0u) << where << ": " << e.what();
                EXPECT_LT(i, data_offset) << where << ": tensor data is not parsed, so cannot be an error";
                continue;
            }
            ++parses;
            EXPECT_GE(i, 4u) << where << ": a corrupted magic parsed";
            expect_faithful_parse(*file, corrupt, where);
            if (i >= data_offset) {
                EXPECT_EQ(written_back(*file).bytes, written_back(*original).bytes) << where;
                EXPECT_EQ(file->data_offset(), data_offset) << where;
            }
        }
    }
    EXPECT_GT(errors, 0u);
    EXPECT_GT(parses, 3 * (bytes.size() - data_offset));  // every data byte, and some metadata (values) too
}

// Specific corruptions of the same file, each with the error it must give.
TEST(Gguf, SpecificCorruptionsGiveTheirErrors) {
    const auto bytes = rich_file();
    const auto set_u64 = [](std::vector<uint8_t> b, size_t at, uint64_t v) {
        std::memcpy(b.data() + at, &v, 8);
        return b;
    };
    // Header: tensor count at 8, metadata count at 16, then the first key's length at 24.
    expect_error(set_u64(bytes, 8, uint64_t{1} << 40), ErrorCode::bad_format, "tensor");
    expect_error(set_u64(bytes, 16, uint64_t{1} << 40), ErrorCode::bad_format, "metadata");
    expect_error(set_u64(bytes, 24, ~uint64_t{0}), ErrorCode::bad_format, "key has length");
    // Tensor 'c': name (u64 1, "c"), n_dims 4, dims 2 1 1 2, type f32, then its data offset.
    const std::vector<uint8_t> info_c = [] {
        ByteWriter w;
        w.string("c").u32(4).u64(2).u64(1).u64(1).u64(2).u32(kF32);
        return w.bytes();
    }();
    const auto at = std::search(bytes.begin(), bytes.end(), info_c.begin(), info_c.end());
    ASSERT_NE(at, bytes.end());
    const size_t offset_at = static_cast<size_t>(at - bytes.begin()) + info_c.size();
    ASSERT_EQ(parse_bytes(set_u64(bytes, offset_at, 128))->find_tensor("c")->offset, 128u);  // found the field
    expect_error(set_u64(bytes, offset_at, 1u << 20), ErrorCode::bad_format, "run past the end of the file");
    expect_error(set_u64(bytes, offset_at, 130), ErrorCode::bad_format, "is not a multiple of the alignment");
    // Its type (f32 -> an unknown number) and its first dimension (absurd).
    std::vector<uint8_t> bad_type = bytes;
    bad_type[offset_at - 4] = 0xEE;
    expect_error(bad_type, ErrorCode::unsupported, "tensor 'c' has type");
    expect_error(set_u64(bytes, offset_at - 4 - 32, uint64_t{1} << 62), ErrorCode::bad_format, "tensor 'c'");
}

// Header + one metadata key, by hand, so that lengths and counts can lie.
ByteWriter header(uint64_t tensor_count, uint64_t kv_count) {
    ByteWriter w;
    w.raw("GGUF", 4).u32(3).u64(tensor_count).u64(kv_count);
    return w;
}

TEST(Gguf, RejectsHugeLengthsAndCountsBeforeAllocating) {
    {  // key length 2^62
        ByteWriter w = header(0, 1);
        w.u64(uint64_t{1} << 62).raw("abcdefghijklmnop", 16);
        expect_error(w.bytes(), ErrorCode::bad_format,
                     "metadata entry 0: key has length 4611686018427387904 but only 16 bytes remain");
    }
    {  // string value length UINT64_MAX
        ByteWriter w = header(0, 1);
        w.string("k").u32(static_cast<uint32_t>(ValueType::STRING)).u64(~uint64_t{0});
        expect_error(w.bytes(), ErrorCode::bad_format, "metadata key 'k': string value has length");
    }
    {  // array of 2^60 uint8 in a file of ~50 bytes
        ByteWriter w = header(0, 1);
        w.string("tokenizer.ggml.scores").u32(static_cast<uint32_t>(ValueType::ARRAY));
        w.u32(static_cast<uint32_t>(ValueType::UINT8)).u64(uint64_t{1} << 60).u8(0);
        expect_error(w.bytes(), ErrorCode::bad_format, "array of 1152921504606846976 uint8 elements");
    }
    {  // array of 1000 strings in a 4000-byte tail: each string needs at least 8 bytes
        ByteWriter w = header(0, 1);
        w.string("k").u32(static_cast<uint32_t>(ValueType::ARRAY)).u32(static_cast<uint32_t>(ValueType::STRING));
        w.u64(1000);
        for (int i = 0; i < 4000; ++i) w.u8(0);
        expect_error(w.bytes(), ErrorCode::bad_format, "array of 1000 string elements needs at least 8 bytes each");
    }
    expect_error(GgufBuilder().set_kv_count(uint64_t{1} << 40).build(), ErrorCode::bad_format,
                 "metadata count 1099511627776 cannot fit");
    expect_error(GgufBuilder().set_tensor_count(~uint64_t{0}).build(), ErrorCode::bad_format,
                 "tensor count 18446744073709551615 cannot fit");
}

TEST(Gguf, BoundsArrayNesting) {
    auto nested = [](int depth) {
        Value v = gv::u8(1);
        for (int i = 0; i < depth; ++i) v = gv::array(i == 0 ? ValueType::UINT8 : ValueType::ARRAY, {v});
        return GgufBuilder().add("deep", v).build();
    };
    EXPECT_NO_THROW(parse_bytes(nested(kMaxArrayDepth)));
    expect_error(nested(kMaxArrayDepth + 1), ErrorCode::bad_format, "arrays nest more than 8 deep");
}

TEST(Gguf, RejectsUnknownValueTypesAndDuplicateKeys) {
    ByteWriter w = header(0, 1);
    w.string("k").u32(13).u8(0);
    expect_error(w.bytes(), ErrorCode::bad_format, "value type 13 is unknown");
    ByteWriter a = header(0, 1);
    a.string("k").u32(static_cast<uint32_t>(ValueType::ARRAY)).u32(99).u64(0);
    expect_error(a.bytes(), ErrorCode::bad_format, "array element type 99 is unknown");

    expect_error(GgufBuilder().add("general.name", gv::string("a")).add("general.name", gv::string("b")).build(),
                 ErrorCode::bad_format, "metadata key 'general.name': duplicate key");
}

TEST(Gguf, RejectsBadTensorInfos) {
    expect_error(GgufBuilder().add_f32_tensor("w", {1}, {0}).add_f32_tensor("w", {1}, {0}).build(),
                 ErrorCode::bad_format, "tensor 'w': duplicate tensor name");
    expect_error(GgufBuilder().add_tensor_info("w", kF32, {8}, 16).build(), ErrorCode::bad_format,
                 "tensor 'w': data offset 16 is not a multiple of the alignment 32");
    expect_error(GgufBuilder().add_tensor_info("w", kF32, {8}, 0).build(), ErrorCode::bad_format,
                 "tensor 'w': 32 bytes of f32 data at data offset 0");
    expect_error(GgufBuilder().add_f32_tensor("a", {1}, {0}).add_tensor_info("w", kF32, {1}, 32).build(),
                 ErrorCode::bad_format, "run past the end of the file");
    // Offset near 2^64: data_offset + offset overflows.
    expect_error(GgufBuilder().add_tensor_info("w", kF32, {1}, ~uint64_t{31}).build(), ErrorCode::bad_format,
                 "run past the end of the file");
    expect_error(GgufBuilder().add_tensor_info("w", kF32, {uint64_t{1} << 62, uint64_t{1} << 62}, 0).build(),
                 ErrorCode::bad_format, "tensor 'w': element count or byte size overflows 64 bits");
    // 2^62 elements fit in int64 but 2^64 bytes of f32 do not.
    expect_error(GgufBuilder().add_tensor_info("w", kF32, {uint64_t{1} << 62}, 0).build(), ErrorCode::bad_format,
                 "overflows 64 bits");
    expect_error(GgufBuilder().add_tensor_info("w", kF32, {4, 0}, 0).build(), ErrorCode::bad_format,
                 "tensor 'w': dims[1] is 0, expected 1..2^63-1");
    expect_error(GgufBuilder().add_tensor_info("w", kF32, {uint64_t{1} << 63}, 0).build(), ErrorCode::bad_format,
                 "dims[0] is 9223372036854775808");
    expect_error(GgufBuilder().add_tensor_info("w", kF32, {}, 0).build(), ErrorCode::bad_format,
                 "tensor 'w': has 0 dimensions, expected 1..4");
    expect_error(GgufBuilder().add_tensor_info("w", kF32, {1, 1, 1, 1, 1}, 0).build(), ErrorCode::bad_format,
                 "has 5 dimensions");
    expect_error(GgufBuilder().add_tensor("w", kQ8_0, {33}, std::vector<uint8_t>(68)).build(), ErrorCode::bad_format,
                 "dims[0] = 33 is not a multiple of the q8_0 block size 32");
}

// A flipped offset in the tensor table can move a tensor onto another's data (issue 19): refused, naming
// both. Touching ranges are fine; a zero-byte tensor cannot exist (dims are >= 1).
TEST(Gguf, RejectsOverlappingTensorData) {
    // a: 64 f32 = 256 bytes at 0; b at 128 lies inside a.
    expect_error(GgufBuilder()
                     .add_tensor("a", kF32, {64}, std::vector<uint8_t>(256))
                     .add_tensor_info("b", kF32, {8}, 128)
                     .build(),
                 ErrorCode::bad_format,
                 "tensor 'b' (data offset 128, 32 bytes) overlaps tensor 'a' (data offset 0, 256 bytes)");
    // The same offset twice, whichever the table lists first.
    expect_error(GgufBuilder()
                     .add_tensor_info("first", kF32, {8}, 0)
                     .add_tensor("data", kF32, {16}, std::vector<uint8_t>(64))
                     .build(),
                 ErrorCode::bad_format, "tensor 'data' (data offset 0, 64 bytes) overlaps tensor 'first'");
    // Adjacent (a ends where b begins) is not an overlap.
    const auto adjacent = GgufBuilder()
                              .add_tensor("a", kF32, {8}, std::vector<uint8_t>(32))
                              .add_tensor("b", kF32, {8}, std::vector<uint8_t>(32))
                              .build();
    const auto file = parse_bytes(adjacent);
    EXPECT_EQ(file->find_tensor("b")->offset, 32u);
}

TEST(Gguf, UnsupportedTensorTypeNamesTensorAndType) {
    const auto bytes =
        GgufBuilder().add_tensor("blk.0.attn_q.weight", kIq2Xxs, {256}, std::vector<uint8_t>(66)).build();
    expect_error(bytes, ErrorCode::unsupported,
                 "tensor 'blk.0.attn_q.weight' has type iq2_xxs, which kvstash does not support (supported: f32, "
                 "f16, bf16, q8_0, q4_0, q4_1, q4_K, q5_K, q6_K)");  // ggml spells the k-quants q4_K
    expect_error(GgufBuilder().add_tensor_info("w", 1000, {1}, 0).build(), ErrorCode::unsupported,
                 "has type type 1000");
}

// Facts about models/SmolLM2-135M-Instruct.Q4_1.gguf as read by the `gguf` Python package 0.19.0
// (gguf.GGUFReader): an oracle independent of this reader. The token count is the vocabulary size,
// dims[1] of token_embd.weight.
TEST(Gguf, ReadsTheDefaultModel) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto file = File::open(test::default_model_path());
    EXPECT_EQ(file->version(), 3u);
    EXPECT_EQ(file->require_string("general.architecture"), "llama");
    EXPECT_EQ(file->require_int("llama.block_count"), 30);
    EXPECT_EQ(file->require_int("llama.embedding_length"), 576);
    EXPECT_EQ(file->tensors().size(), 272u);

    const TensorInfo* embd = file->find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->type, TensorType::Q8_0);
    EXPECT_EQ(embd->dims, (std::vector<int64_t>{576, 49152}));
    EXPECT_EQ(embd->n_bytes, uint64_t{576} / 32 * 34 * 49152);

    const TensorInfo* q = file->find_tensor("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, TensorType::Q4_1);
    EXPECT_EQ(q->dims, (std::vector<int64_t>{576, 576}));

    const std::vector<Value>* tokens = file->get_array("tokenizer.ggml.tokens", ValueType::STRING);
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->size(), 49152u);
    // Every tensor lies inside the file (checked at parse time; touch the last byte of each).
    for (const TensorInfo& t : file->tensors()) {
        volatile uint8_t last = file->tensor_data(t)[t.n_bytes - 1];
        (void)last;
    }
}

}  // namespace
}  // namespace kvstash::gguf
