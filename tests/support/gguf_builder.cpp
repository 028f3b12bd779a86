#include "support/gguf_builder.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace kvstash::test {

using gguf::Value;
using gguf::ValueType;

ByteWriter& ByteWriter::u8(uint8_t v) {
    bytes_.push_back(v);
    return *this;
}
ByteWriter& ByteWriter::u16(uint16_t v) {
    for (int i = 0; i < 2; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
}
ByteWriter& ByteWriter::u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
}
ByteWriter& ByteWriter::u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
}
ByteWriter& ByteWriter::f32(float v) { return u32(std::bit_cast<uint32_t>(v)); }
ByteWriter& ByteWriter::f64(double v) { return u64(std::bit_cast<uint64_t>(v)); }
ByteWriter& ByteWriter::string(std::string_view s) {
    u64(s.size());
    return raw(s.data(), s.size());
}
ByteWriter& ByteWriter::raw(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
    return *this;
}
ByteWriter& ByteWriter::pad_to(uint64_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
    return *this;
}

void write_gguf_value(ByteWriter& out, const Value& value) {
    switch (value.type) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::BOOL: out.u8(static_cast<uint8_t>(value.uinteger)); break;
        case ValueType::UINT16:
        case ValueType::INT16: out.u16(static_cast<uint16_t>(value.uinteger)); break;
        case ValueType::UINT32:
        case ValueType::INT32: out.u32(static_cast<uint32_t>(value.uinteger)); break;
        case ValueType::UINT64:
        case ValueType::INT64: out.u64(value.uinteger); break;
        case ValueType::FLOAT32: out.f32(static_cast<float>(value.real)); break;
        case ValueType::FLOAT64: out.f64(value.real); break;
        case ValueType::STRING: out.string(value.string); break;
        case ValueType::ARRAY:
            out.u32(static_cast<uint32_t>(value.array_type));
            out.u64(value.array.size());
            for (const Value& element : value.array) write_gguf_value(out, element);
            break;
    }
}

namespace gv {
namespace {
Value make_unsigned(ValueType type, uint64_t v) {
    Value out;
    out.type = type;
    out.uinteger = v;
    out.integer = static_cast<int64_t>(v);
    return out;
}
Value make_signed(ValueType type, int64_t v) {
    Value out;
    out.type = type;
    out.integer = v;
    out.uinteger = static_cast<uint64_t>(v);
    return out;
}
Value make_real(ValueType type, double v) {
    Value out;
    out.type = type;
    out.real = v;
    return out;
}
}  // namespace

Value u8(uint8_t v) { return make_unsigned(ValueType::UINT8, v); }
Value i8(int8_t v) { return make_signed(ValueType::INT8, v); }
Value u16(uint16_t v) { return make_unsigned(ValueType::UINT16, v); }
Value i16(int16_t v) { return make_signed(ValueType::INT16, v); }
Value u32(uint32_t v) { return make_unsigned(ValueType::UINT32, v); }
Value i32(int32_t v) { return make_signed(ValueType::INT32, v); }
Value u64(uint64_t v) { return make_unsigned(ValueType::UINT64, v); }
Value i64(int64_t v) { return make_signed(ValueType::INT64, v); }
Value f32(float v) { return make_real(ValueType::FLOAT32, v); }
Value f64(double v) { return make_real(ValueType::FLOAT64, v); }
Value boolean(bool v) { return make_unsigned(ValueType::BOOL, v ? 1 : 0); }
Value string(std::string v) {
    Value out;
    out.type = ValueType::STRING;
    out.string = std::move(v);
    return out;
}
Value array(ValueType element_type, std::vector<Value> elements) {
    Value out;
    out.type = ValueType::ARRAY;
    out.array_type = element_type;
    out.array = std::move(elements);
    return out;
}
Value string_array(const std::vector<std::string>& elements) {
    std::vector<Value> values;
    values.reserve(elements.size());
    for (const std::string& s : elements) values.push_back(string(s));
    return array(ValueType::STRING, std::move(values));
}
}  // namespace gv

GgufBuilder& GgufBuilder::add(std::string key, Value value) {
    metadata_.emplace_back(std::move(key), std::move(value));
    return *this;
}

GgufBuilder& GgufBuilder::add_tensor(std::string name, uint32_t raw_type, std::vector<uint64_t> dims,
                                     std::vector<uint8_t> data) {
    tensors_.push_back({std::move(name), raw_type, std::move(dims), std::move(data), std::nullopt});
    return *this;
}

GgufBuilder& GgufBuilder::add_f32_tensor(std::string name, std::vector<uint64_t> dims,
                                         const std::vector<float>& values) {
    ByteWriter w;
    for (float v : values) w.f32(v);
    return add_tensor(std::move(name), 0, std::move(dims), w.bytes());
}

GgufBuilder& GgufBuilder::add_tensor_info(std::string name, uint32_t raw_type, std::vector<uint64_t> dims,
                                          uint64_t offset) {
    tensors_.push_back({std::move(name), raw_type, std::move(dims), {}, offset});
    return *this;
}

GgufBuilder& GgufBuilder::set_magic(std::string four_bytes) {
    magic_ = std::move(four_bytes);
    return *this;
}
GgufBuilder& GgufBuilder::set_version(uint32_t version) {
    version_ = version;
    return *this;
}
GgufBuilder& GgufBuilder::set_tensor_count(uint64_t count) {
    tensor_count_ = count;
    return *this;
}
GgufBuilder& GgufBuilder::set_kv_count(uint64_t count) {
    kv_count_ = count;
    return *this;
}
GgufBuilder& GgufBuilder::set_layout_alignment(uint64_t alignment) {
    alignment_ = alignment;
    return *this;
}

uint64_t GgufBuilder::layout_alignment() const {
    if (alignment_) return *alignment_;
    for (const auto& [key, value] : metadata_) {
        if (key == "general.alignment" && value.type == ValueType::UINT32 && value.uinteger != 0 &&
            (value.uinteger & (value.uinteger - 1)) == 0) {
            return value.uinteger;
        }
    }
    return gguf::kDefaultAlignment;
}

std::vector<uint8_t> GgufBuilder::build() const {
    const uint64_t alignment = layout_alignment();

    // Data offsets first: tensors with bytes are packed in order, each at the next aligned offset.
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const Tensor& t : tensors_) {
        if (t.explicit_offset) {
            offsets.push_back(*t.explicit_offset);
            continue;
        }
        next = (next + alignment - 1) / alignment * alignment;
        offsets.push_back(next);
        next += t.data.size();
    }

    ByteWriter out;
    out.raw(magic_.data(), magic_.size());
    out.u32(version_);
    out.u64(tensor_count_.value_or(tensors_.size()));
    out.u64(kv_count_.value_or(metadata_.size()));
    for (const auto& [key, value] : metadata_) {
        out.string(key);
        out.u32(static_cast<uint32_t>(value.type));
        write_gguf_value(out, value);
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const Tensor& t = tensors_[i];
        out.string(t.name);
        out.u32(static_cast<uint32_t>(t.dims.size()));
        for (uint64_t d : t.dims) out.u64(d);
        out.u32(t.raw_type);
        out.u64(offsets[i]);
    }
    const bool has_data = next > 0;
    if (has_data) {
        out.pad_to(alignment);
        const size_t data_start = out.size();
        out.bytes().resize(data_start + next, 0);
        for (size_t i = 0; i < tensors_.size(); ++i) {
            const Tensor& t = tensors_[i];
            if (t.explicit_offset || t.data.empty()) continue;
            std::memcpy(out.bytes().data() + data_start + offsets[i], t.data.data(), t.data.size());
        }
    }
    return std::move(out.bytes());
}

void GgufBuilder::write(const std::string& path) const {
    const std::vector<uint8_t> bytes = build();
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!file) throw std::runtime_error("cannot write " + path);
}

}  // namespace kvstash::test
