// A small GGUF writer for tests: builds valid files from metadata values and tensors, and, through its
// overrides and ByteWriter, malformed ones. Nothing is validated: what you add is what gets written.
//
//   using namespace kvstash::test;
//   std::vector<uint8_t> bytes = GgufBuilder()
//       .add("general.architecture", gv::string("llama"))
//       .add("llama.block_count", gv::u32(2))
//       .add_f32_tensor("output_norm.weight", {4}, {1, 2, 3, 4})
//       .build();
//   auto file = kvstash::gguf::File::parse(bytes.data(), bytes.size(), "test.gguf");
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"

namespace kvstash::test {

// Little-endian byte sink, for writing GGUF pieces by hand (hostile lengths, cut-off headers, ...).
class ByteWriter {
public:
    ByteWriter& u8(uint8_t v);
    ByteWriter& u16(uint16_t v);
    ByteWriter& u32(uint32_t v);
    ByteWriter& u64(uint64_t v);
    ByteWriter& f32(float v);
    ByteWriter& f64(double v);
    ByteWriter& string(std::string_view s);  // u64 length + bytes (GGUF string)
    ByteWriter& raw(const void* data, size_t n);
    ByteWriter& pad_to(uint64_t alignment);  // zero bytes up to the next multiple of `alignment`

    const std::vector<uint8_t>& bytes() const { return bytes_; }
    std::vector<uint8_t>& bytes() { return bytes_; }
    size_t size() const { return bytes_.size(); }

private:
    std::vector<uint8_t> bytes_;
};

// Encodes one metadata value (its payload, without the leading type): scalars by `value.type`, arrays as
// u32 array_type, u64 count, then each element by its own `type` (keep it equal to array_type for a
// valid file).
void write_gguf_value(ByteWriter& out, const gguf::Value& value);

// Constructors for metadata values ("gv" = GGUF value).
namespace gv {
gguf::Value u8(uint8_t v);
gguf::Value i8(int8_t v);
gguf::Value u16(uint16_t v);
gguf::Value i16(int16_t v);
gguf::Value u32(uint32_t v);
gguf::Value i32(int32_t v);
gguf::Value u64(uint64_t v);
gguf::Value i64(int64_t v);
gguf::Value f32(float v);
gguf::Value f64(double v);
gguf::Value boolean(bool v);
gguf::Value string(std::string v);
gguf::Value array(gguf::ValueType element_type, std::vector<gguf::Value> elements);
gguf::Value string_array(const std::vector<std::string>& elements);
}  // namespace gv

class GgufBuilder {
public:
    // Metadata entries, written in call order (a repeated key is written twice).
    GgufBuilder& add(std::string key, gguf::Value value);

    // A tensor whose bytes are written to the data section at the next offset aligned to the layout
    // alignment. `dims` in ggml order (dims[0] fastest); `raw_type` a ggml type number; `data` is not
    // checked against dims and type.
    GgufBuilder& add_tensor(std::string name, uint32_t raw_type, std::vector<uint64_t> dims, std::vector<uint8_t> data);
    GgufBuilder& add_f32_tensor(std::string name, std::vector<uint64_t> dims, const std::vector<float>& values);
    // A tensor info with an explicit data offset (relative to the data section) and no bytes written:
    // for misaligned or out-of-file offsets.
    GgufBuilder& add_tensor_info(std::string name, uint32_t raw_type, std::vector<uint64_t> dims, uint64_t offset);

    // Header overrides, for malformed files. Defaults: "GGUF", version 3, the real counts.
    GgufBuilder& set_magic(std::string four_bytes);
    GgufBuilder& set_version(uint32_t version);
    GgufBuilder& set_tensor_count(uint64_t count);
    GgufBuilder& set_kv_count(uint64_t count);
    // Alignment used to lay out the file. Default: the value of a uint32 "general.alignment" entry if
    // there is one, else 32. Setting it does not add the metadata key.
    GgufBuilder& set_layout_alignment(uint64_t alignment);

    std::vector<uint8_t> build() const;
    // Writes build() to `path`; throws std::runtime_error if it cannot.
    void write(const std::string& path) const;

private:
    struct Tensor {
        std::string name;
        uint32_t raw_type;
        std::vector<uint64_t> dims;
        std::vector<uint8_t> data;
        std::optional<uint64_t> explicit_offset;  // set by add_tensor_info (no data written)
    };
    uint64_t layout_alignment() const;

    std::string magic_ = "GGUF";
    uint32_t version_ = 3;
    std::optional<uint64_t> tensor_count_;
    std::optional<uint64_t> kv_count_;
    std::optional<uint64_t> alignment_;
    std::vector<std::pair<std::string, gguf::Value>> metadata_;
    std::vector<Tensor> tensors_;
};

}  // namespace kvstash::test
