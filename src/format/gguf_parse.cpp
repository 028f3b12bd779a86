// GGUF layout (little-endian; spec: ggml docs/gguf.md):
//   header   "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   metadata kv_count x { string key | u32 value_type | value }
//   tensors  tensor_count x { string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset }
//   padding  to general.alignment (default 32)
//   data     tensor bytes, each at data_offset + offset
// where string = u64 length + bytes, and an array value = u32 element_type | u64 count | elements.
//
// Hostile input: every count and length is compared with the bytes that remain *before* anything is
// allocated or read, using the smallest encoding an element could have, and all size arithmetic is
// overflow-checked, so a short file can never make us allocate much or read past its end.
#include "format/gguf_parse.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <unordered_set>
#include <vector>

#include "kvstash/error.h"

namespace kvstash::gguf::detail {

namespace {

constexpr uint32_t kLastValueType = static_cast<uint32_t>(ValueType::FLOAT64);
// Smallest possible encodings, used to bound counts by the bytes left.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims, type, offset (dims: below)

// Types kvstash computes with, in the order error messages list them.
constexpr std::array kSupportedTypes = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                        TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                        TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

uint64_t min_encoded_size(ValueType type) {
    switch (type) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::BOOL: return 1;
        case ValueType::UINT16:
        case ValueType::INT16: return 2;
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::FLOAT32: return 4;
        case ValueType::UINT64:
        case ValueType::INT64:
        case ValueType::FLOAT64: return 8;
        case ValueType::STRING: return 8;     // length, empty string
        case ValueType::ARRAY: return 4 + 8;  // element type, count, no elements
    }
    return 1;
}

// A bounds-checked little-endian reader over [data, data + size). Errors name the file, what was being
// read (the context: "metadata key 'x'", "tensor 'y'") and the offset.
class Cursor {
public:
    Cursor(const uint8_t* data, size_t size, const std::string& display_name)
        : data_(data), size_(size), name_(display_name) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }
    void set_context(std::string context) { context_ = std::move(context); }

    [[noreturn]] void fail(const std::string& detail, uint64_t at, ErrorCode code = ErrorCode::bad_format) const {
        std::string message = name_ + ": ";
        if (!context_.empty()) message += context_ + ": ";
        message += detail + " (at offset " + std::to_string(at) + ")";
        throw Error(code, message);
    }

    void need(uint64_t n, const char* what) const {
        if (n > remaining()) {
            fail(std::string("truncated file: ") + what + " needs " + std::to_string(n) + " bytes but only " +
                     std::to_string(remaining()) + " remain",
                 pos_);
        }
    }

    template <typename T>
    T read(const char* what) {
        static_assert(std::numeric_limits<T>::is_integer && !std::numeric_limits<T>::is_signed);
        need(sizeof(T), what);
        T value = 0;
        for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<T>(data_[pos_ + i]) << (8 * i));
        pos_ += sizeof(T);
        return value;
    }

    std::string read_string(const char* what) {
        const uint64_t start = pos_;
        const uint64_t length = read<uint64_t>(what);
        if (length > remaining()) {
            fail(std::string(what) + " has length " + std::to_string(length) + " but only " +
                     std::to_string(remaining()) + " bytes remain in the file",
                 start);
        }
        std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(length));
        pos_ += length;
        return s;
    }

private:
    const uint8_t* data_;
    uint64_t size_;
    uint64_t pos_ = 0;
    const std::string& name_;
    std::string context_;
};

class Parser {
public:
    Parser(const uint8_t* data, size_t size, const std::string& display_name)
        : cursor_(data, size, display_name), size_(size) {}

    ParsedFile run() {
        read_header();
        read_metadata();
        read_alignment();
        read_tensor_infos();
        check_tensors();
        return std::move(out_);
    }

private:
    void read_header() {
        cursor_.set_context("header");
        const uint32_t magic = cursor_.read<uint32_t>("magic");
        constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read little-endian
        constexpr uint32_t kMagicSwapped = 0x47475546;
        if (magic != kMagic && magic != kMagicSwapped) {
            std::string shown;
            for (int i = 0; i < 4; ++i) {
                const char c = static_cast<char>((magic >> (8 * i)) & 0xff);
                shown += (c >= 0x20 && c < 0x7f) ? c : '.';
            }
            cursor_.fail("not a GGUF file: magic is '" + shown + "', expected 'GGUF'", 0);
        }
        const uint32_t version = cursor_.read<uint32_t>("version");
        const uint32_t swapped = __builtin_bswap32(version);
        if (magic == kMagicSwapped || ((version & 0xffff) == 0 && swapped >= 1 && swapped <= 3)) {
            cursor_.fail("big-endian GGUF file (version field reads " + std::to_string(version) +
                             "); kvstash reads little-endian files only: re-convert the model on a "
                             "little-endian machine",
                         4, ErrorCode::unsupported);
        }
        if (version == 1) {
            cursor_.fail(
                "GGUF version 1 is not supported (it used 32-bit counts); kvstash reads v2 and v3: "
                "re-convert the model with a current llama.cpp",
                4, ErrorCode::unsupported);
        }
        if (version == 0) cursor_.fail("invalid GGUF version 0, expected 2 or 3", 4);
        if (version > 3) {
            cursor_.fail("GGUF version " + std::to_string(version) + " is newer than kvstash supports (2 and 3)", 4,
                         ErrorCode::unsupported);
        }
        out_.version = version;
        tensor_count_ = cursor_.read<uint64_t>("tensor count");
        kv_count_ = cursor_.read<uint64_t>("metadata count");
        if (kv_count_ > cursor_.remaining() / kMinKvBytes) {
            cursor_.fail("metadata count " + std::to_string(kv_count_) + " cannot fit in the " +
                             std::to_string(cursor_.remaining()) + " bytes that remain",
                         16);
        }
    }

    void read_metadata() {
        out_.metadata.reserve(static_cast<size_t>(kv_count_));
        std::unordered_set<std::string> seen;
        for (uint64_t i = 0; i < kv_count_; ++i) {
            const uint64_t entry_start = cursor_.pos();
            cursor_.set_context("metadata entry " + std::to_string(i));
            std::string key = cursor_.read_string("key");
            cursor_.set_context("metadata key '" + key + "'");
            if (!seen.insert(key).second) cursor_.fail("duplicate key; each key may appear only once", entry_start);
            const ValueType type = read_value_type("value type");
            Value value = read_value(type, 0);
            out_.metadata.emplace_back(std::move(key), std::move(value));
        }
    }

    ValueType read_value_type(const char* what) {
        const uint64_t at = cursor_.pos();
        const uint32_t raw = cursor_.read<uint32_t>(what);
        if (raw > kLastValueType) {
            cursor_.fail(std::string(what) + " " + std::to_string(raw) + " is unknown, expected 0..12", at);
        }
        return static_cast<ValueType>(raw);
    }

    // Fails if `n` more values would take the metadata past kMaxMetadataValues.
    void check_value_budget(uint64_t n, uint64_t at) const {
        if (n > kMaxMetadataValues - values_) {
            cursor_.fail("metadata holds more than " + std::to_string(kMaxMetadataValues) +
                             " values in all, more than any model needs",
                         at);
        }
    }

    Value read_value(ValueType type, int depth) {
        Value v;
        v.type = type;
        const uint64_t at = cursor_.pos();
        check_value_budget(1, at);
        ++values_;
        auto set_unsigned = [&v](uint64_t x) {
            v.uinteger = x;
            v.integer = static_cast<int64_t>(x);
        };
        auto set_signed = [&v](int64_t x) {
            v.integer = x;
            v.uinteger = static_cast<uint64_t>(x);
        };
        switch (type) {
            case ValueType::UINT8: set_unsigned(cursor_.read<uint8_t>("uint8 value")); break;
            case ValueType::INT8: set_signed(static_cast<int8_t>(cursor_.read<uint8_t>("int8 value"))); break;
            case ValueType::UINT16: set_unsigned(cursor_.read<uint16_t>("uint16 value")); break;
            case ValueType::INT16: set_signed(static_cast<int16_t>(cursor_.read<uint16_t>("int16 value"))); break;
            case ValueType::UINT32: set_unsigned(cursor_.read<uint32_t>("uint32 value")); break;
            case ValueType::INT32: set_signed(static_cast<int32_t>(cursor_.read<uint32_t>("int32 value"))); break;
            case ValueType::UINT64: set_unsigned(cursor_.read<uint64_t>("uint64 value")); break;
            case ValueType::INT64: set_signed(static_cast<int64_t>(cursor_.read<uint64_t>("int64 value"))); break;
            case ValueType::BOOL: set_unsigned(cursor_.read<uint8_t>("bool value") != 0 ? 1 : 0); break;
            case ValueType::FLOAT32: v.real = std::bit_cast<float>(cursor_.read<uint32_t>("float32 value")); break;
            case ValueType::FLOAT64: v.real = std::bit_cast<double>(cursor_.read<uint64_t>("float64 value")); break;
            case ValueType::STRING: v.string = cursor_.read_string("string value"); break;
            case ValueType::ARRAY: read_array(v, depth + 1); break;
        }
        return v;
    }

    void read_array(Value& v, int depth) {
        const uint64_t at = cursor_.pos();
        if (depth > kMaxArrayDepth) {
            cursor_.fail("arrays nest more than " + std::to_string(kMaxArrayDepth) + " deep", at);
        }
        v.array_type = read_value_type("array element type");
        const uint64_t count = cursor_.read<uint64_t>("array count");
        const uint64_t min_size = min_encoded_size(v.array_type);
        if (count > cursor_.remaining() / min_size) {
            cursor_.fail("array of " + std::to_string(count) + " " + value_type_name(v.array_type) +
                             " elements needs at least " + std::to_string(min_size) + " bytes each but only " +
                             std::to_string(cursor_.remaining()) + " bytes remain",
                         at);
        }
        check_value_budget(count, at);
        v.array.reserve(static_cast<size_t>(count));
        for (uint64_t i = 0; i < count; ++i) v.array.push_back(read_value(v.array_type, depth));
    }

    void read_alignment() {
        for (const auto& [key, value] : out_.metadata) {
            if (key != "general.alignment") continue;
            cursor_.set_context("metadata key 'general.alignment'");
            if (value.type != ValueType::UINT32) {
                cursor_.fail(std::string("has type ") + value_type_name(value.type) + ", expected uint32", 0);
            }
            const uint64_t a = value.uinteger;
            if (a == 0 || (a & (a - 1)) != 0) {
                cursor_.fail("alignment " + std::to_string(a) + " is not a power of two", 0);
            }
            out_.alignment = a;
        }
    }

    void read_tensor_infos() {
        cursor_.set_context("tensor infos");
        if (tensor_count_ > cursor_.remaining() / kMinTensorInfoBytes) {
            cursor_.fail("tensor count " + std::to_string(tensor_count_) + " cannot fit in the " +
                             std::to_string(cursor_.remaining()) + " bytes that remain",
                         cursor_.pos());
        }
        out_.tensors.reserve(static_cast<size_t>(tensor_count_));
        info_offsets_.reserve(static_cast<size_t>(tensor_count_));
        for (uint64_t i = 0; i < tensor_count_; ++i) {
            const uint64_t info_start = cursor_.pos();
            cursor_.set_context("tensor info " + std::to_string(i));
            TensorInfo info;
            info.name = cursor_.read_string("name");
            cursor_.set_context("tensor '" + info.name + "'");
            const uint64_t dims_at = cursor_.pos();
            const uint32_t n_dims = cursor_.read<uint32_t>("dimension count");
            if (n_dims == 0 || n_dims > kMaxTensorDims) {
                cursor_.fail(
                    "has " + std::to_string(n_dims) + " dimensions, expected 1.." + std::to_string(kMaxTensorDims),
                    dims_at);
            }
            for (uint32_t d = 0; d < n_dims; ++d) {
                const uint64_t at = cursor_.pos();
                const uint64_t ne = cursor_.read<uint64_t>("dimension");
                if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                    cursor_.fail("dims[" + std::to_string(d) + "] is " + std::to_string(ne) + ", expected 1..2^63-1",
                                 at);
                }
                info.dims.push_back(static_cast<int64_t>(ne));
            }
            info.raw_type = cursor_.read<uint32_t>("type");
            info.type = static_cast<TensorType>(info.raw_type);  // checked in check_tensors()
            info.offset = cursor_.read<uint64_t>("data offset");
            out_.tensors.push_back(std::move(info));
            info_offsets_.push_back(info_start);
        }
        // The data section starts at the first aligned offset after the infos (pos <= size, no overflow).
        const uint64_t pos = cursor_.pos();
        out_.data_offset = (pos + out_.alignment - 1) / out_.alignment * out_.alignment;
    }

    void check_tensors() {
        std::unordered_set<std::string_view> names;
        for (size_t i = 0; i < out_.tensors.size(); ++i) {
            TensorInfo& t = out_.tensors[i];
            const uint64_t at = info_offsets_[i];
            cursor_.set_context("tensor '" + t.name + "'");
            if (!names.insert(t.name).second) cursor_.fail("duplicate tensor name", at);
            if (!is_readable_tensor_type(t.raw_type)) {
                std::string supported;
                for (TensorType s : kSupportedTypes) {
                    supported += (supported.empty() ? "" : ", ") + std::string(tensor_type_traits(s).name);
                }
                cursor_.set_context("");
                cursor_.fail("tensor '" + t.name + "' has type " + tensor_type_name(t.raw_type) +
                                 ", which kvstash does not support (supported: " + supported + ")",
                             at, ErrorCode::unsupported);
            }
            const TensorTypeTraits& traits = tensor_type_traits(t.type);
            const std::string type_name = traits.name;
            if (t.dims[0] % traits.block_size != 0) {
                cursor_.fail("dims[0] = " + std::to_string(t.dims[0]) + " is not a multiple of the " + type_name +
                                 " block size " + std::to_string(traits.block_size),
                             at);
            }
            // Checked: elements = prod(dims); bytes = dims[0] / block_size * type_size * prod(dims[1:]).
            int64_t elements = 1;
            uint64_t bytes = static_cast<uint64_t>(t.dims[0]) / traits.block_size;
            bool overflow = __builtin_mul_overflow(bytes, uint64_t{traits.type_size}, &bytes);
            for (size_t d = 0; d < t.dims.size(); ++d) {
                overflow |= __builtin_mul_overflow(elements, t.dims[d], &elements);
                if (d > 0) overflow |= __builtin_mul_overflow(bytes, static_cast<uint64_t>(t.dims[d]), &bytes);
            }
            if (overflow) cursor_.fail("element count or byte size overflows 64 bits", at);
            t.n_bytes = bytes;
            if (t.offset % out_.alignment != 0) {
                cursor_.fail("data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                                 std::to_string(out_.alignment),
                             at);
            }
            uint64_t begin = 0;
            uint64_t end = 0;
            if (__builtin_add_overflow(out_.data_offset, t.offset, &begin) ||
                __builtin_add_overflow(begin, t.n_bytes, &end) || end > size_) {
                cursor_.fail(std::to_string(t.n_bytes) + " bytes of " + type_name + " data at data offset " +
                                 std::to_string(t.offset) + " (file offset " + std::to_string(out_.data_offset) +
                                 " + " + std::to_string(t.offset) + ") run past the end of the file (" +
                                 std::to_string(size_) + " bytes)",
                             at);
            }
        }
        check_no_overlap();
    }

    // Every tensor's data must be its own: a flipped offset that moves a tensor onto another's bytes would
    // otherwise load and run with exit 0 and different output. (The header, metadata and tensor infos
    // cannot be overlapped: offsets are unsigned and relative to data_offset, which lies after them.)
    // Adjacent ranges [begin, begin + n_bytes) sorted by begin must not intersect; O(n log n).
    void check_no_overlap() {
        std::vector<size_t> order;
        order.reserve(out_.tensors.size());
        for (size_t i = 0; i < out_.tensors.size(); ++i) {
            if (out_.tensors[i].n_bytes > 0) order.push_back(i);
        }
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return out_.tensors[a].offset < out_.tensors[b].offset ||
                   (out_.tensors[a].offset == out_.tensors[b].offset && a < b);
        });
        for (size_t k = 1; k < order.size(); ++k) {
            const TensorInfo& before = out_.tensors[order[k - 1]];
            const TensorInfo& after = out_.tensors[order[k]];
            const uint64_t before_end = before.offset + before.n_bytes;  // <= size_: checked above
            if (after.offset < before_end) {
                cursor_.set_context("");
                cursor_.fail("tensor '" + after.name + "' (data offset " + std::to_string(after.offset) + ", " +
                                 std::to_string(after.n_bytes) + " bytes) overlaps tensor '" + before.name +
                                 "' (data offset " + std::to_string(before.offset) + ", " +
                                 std::to_string(before.n_bytes) + " bytes)",
                             info_offsets_[order[k]]);
            }
        }
    }

    Cursor cursor_;
    uint64_t size_;
    uint64_t tensor_count_ = 0;
    uint64_t kv_count_ = 0;
    uint64_t values_ = 0;                 // metadata values read so far, bounded by kMaxMetadataValues
    std::vector<uint64_t> info_offsets_;  // file offset of each tensor info, for messages
    ParsedFile out_;
};

}  // namespace

ParsedFile parse_file(const uint8_t* data, size_t size, const std::string& display_name) {
    return Parser(data, size, display_name).run();
}

}  // namespace kvstash::gguf::detail
