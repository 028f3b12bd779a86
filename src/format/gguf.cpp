// gguf::File: owns the mapping (or borrows the caller's buffer), the parsed metadata and tensor infos,
// and the lookup tables. The format rules live in gguf_parse.cpp.
#include "format/gguf.h"

#include <functional>
#include <unordered_map>

#include "format/gguf_parse.h"
#include "format/mmap_file.h"
#include "kvstash/error.h"

namespace kvstash::gguf {

namespace {

// Heterogeneous lookup: find(std::string_view) without building a std::string.
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using NameIndex = std::unordered_map<std::string, size_t, StringHash, std::equal_to<>>;

bool is_integer_type(ValueType t) {
    switch (t) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::UINT16:
        case ValueType::INT16:
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::UINT64:
        case ValueType::INT64: return true;
        default: return false;
    }
}

}  // namespace

const char* value_type_name(ValueType type) {
    switch (type) {
        case ValueType::UINT8: return "uint8";
        case ValueType::INT8: return "int8";
        case ValueType::UINT16: return "uint16";
        case ValueType::INT16: return "int16";
        case ValueType::UINT32: return "uint32";
        case ValueType::INT32: return "int32";
        case ValueType::FLOAT32: return "float32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::UINT64: return "uint64";
        case ValueType::INT64: return "int64";
        case ValueType::FLOAT64: return "float64";
    }
    return "unknown type";
}

int64_t TensorInfo::n_elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;  // cannot overflow: checked when the file was parsed
    return n;
}

struct File::Impl {
    MappedFile mapping;  // empty for File::parse (the caller owns the bytes)
    const uint8_t* data = nullptr;
    size_t size = 0;
    std::string path;
    detail::ParsedFile parsed;
    NameIndex key_index;     // key -> index in parsed.metadata
    NameIndex tensor_index;  // name -> index in parsed.tensors
    // File::assemble: each tensor's bytes (parallel to parsed.tensors) and what keeps them alive.
    std::vector<const uint8_t*> tensor_bytes;
    std::shared_ptr<const void> owner;

    [[noreturn]] void fail_key(std::string_view key, const std::string& what) const {
        throw Error(ErrorCode::bad_format, path + ": metadata key '" + std::string(key) + "' " + what);
    }
    [[noreturn]] void fail_type(std::string_view key, const Value& v, const char* expected) const {
        fail_key(key, std::string("has type ") + value_type_name(v.type) + ", expected " + expected);
    }
};

File::File() : impl_(std::make_unique<Impl>()) {}
File::~File() = default;

std::unique_ptr<File> File::open(const std::string& path) {
    MappedFile mapping = MappedFile::open(path);
    const uint8_t* data = mapping.data();
    const size_t size = mapping.size();
    std::unique_ptr<File> file = parse(data, size, path);
    file->impl_->mapping = std::move(mapping);  // same addresses: moving a mapping does not remap
    return file;
}

std::unique_ptr<File> File::parse(const uint8_t* data, size_t size, std::string display_name) {
    std::unique_ptr<File> file(new File());
    Impl& impl = *file->impl_;
    impl.data = data;
    impl.size = size;
    impl.path = std::move(display_name);
    if (size == 0) {
        throw Error(ErrorCode::bad_format, impl.path + ": file is empty (0 bytes), expected a GGUF header");
    }
    impl.parsed = detail::parse_file(data, size, impl.path);
    file->index();
    return file;
}

std::unique_ptr<File> File::assemble(std::string display_name, std::vector<std::pair<std::string, Value>> metadata,
                                     std::vector<TensorInfo> tensors, std::vector<const uint8_t*> tensor_bytes,
                                     std::shared_ptr<const void> owner, size_t size) {
    if (tensor_bytes.size() != tensors.size()) {
        throw Error(ErrorCode::internal, "gguf::File::assemble: one data pointer per tensor expected");
    }
    std::unique_ptr<File> file(new File());
    Impl& impl = *file->impl_;
    impl.size = size;
    impl.path = std::move(display_name);
    impl.parsed.metadata = std::move(metadata);
    impl.parsed.tensors = std::move(tensors);
    impl.tensor_bytes = std::move(tensor_bytes);
    impl.owner = std::move(owner);
    file->index();
    if (impl.key_index.size() != impl.parsed.metadata.size() ||
        impl.tensor_index.size() != impl.parsed.tensors.size()) {
        throw Error(ErrorCode::bad_format, impl.path + ": duplicate metadata key or tensor name");
    }
    return file;
}

void File::index() {
    Impl& impl = *impl_;
    impl.key_index.reserve(impl.parsed.metadata.size());
    for (size_t i = 0; i < impl.parsed.metadata.size(); ++i) impl.key_index.emplace(impl.parsed.metadata[i].first, i);
    impl.tensor_index.reserve(impl.parsed.tensors.size());
    for (size_t i = 0; i < impl.parsed.tensors.size(); ++i) impl.tensor_index.emplace(impl.parsed.tensors[i].name, i);
}

uint32_t File::version() const { return impl_->parsed.version; }
const std::string& File::path() const { return impl_->path; }
uint64_t File::alignment() const { return impl_->parsed.alignment; }
uint64_t File::data_offset() const { return impl_->parsed.data_offset; }

const std::vector<std::pair<std::string, Value>>& File::metadata() const { return impl_->parsed.metadata; }

const Value* File::find(std::string_view key) const {
    auto it = impl_->key_index.find(key);
    return it == impl_->key_index.end() ? nullptr : &impl_->parsed.metadata[it->second].second;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type == ValueType::BOOL || !is_integer_type(v->type)) impl_->fail_type(key, *v, "an integer");
    if (v->type == ValueType::UINT64 && v->uinteger > static_cast<uint64_t>(INT64_MAX)) {
        impl_->fail_key(key, "holds " + std::to_string(v->uinteger) + ", which does not fit in int64");
    }
    return v->integer;
}

std::optional<double> File::get_float(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type == ValueType::FLOAT32 || v->type == ValueType::FLOAT64) return v->real;
    if (v->type == ValueType::UINT64) return static_cast<double>(v->uinteger);
    if (is_integer_type(v->type)) return static_cast<double>(v->integer);
    impl_->fail_type(key, *v, "a number");
}

std::optional<std::string> File::get_string(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != ValueType::STRING) impl_->fail_type(key, *v, "string");
    return v->string;
}

std::optional<bool> File::get_bool(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != ValueType::BOOL) impl_->fail_type(key, *v, "bool");
    return v->integer != 0;
}

int64_t File::require_int(std::string_view key) const {
    if (auto v = get_int(key)) return *v;
    impl_->fail_key(key, "is missing (expected an integer)");
}

double File::require_float(std::string_view key) const {
    if (auto v = get_float(key)) return *v;
    impl_->fail_key(key, "is missing (expected a number)");
}

std::string File::require_string(std::string_view key) const {
    if (auto v = get_string(key)) return *v;
    impl_->fail_key(key, "is missing (expected a string)");
}

const std::vector<Value>* File::get_array(std::string_view key, ValueType element_type) const {
    const Value* v = find(key);
    if (v == nullptr) return nullptr;
    if (v->type != ValueType::ARRAY || v->array_type != element_type) {
        const std::string expected = std::string("array of ") + value_type_name(element_type);
        const std::string actual = v->type == ValueType::ARRAY
                                       ? std::string("array of ") + value_type_name(v->array_type)
                                       : std::string(value_type_name(v->type));
        impl_->fail_key(key, "has type " + actual + ", expected " + expected);
    }
    return &v->array;
}

const std::vector<TensorInfo>& File::tensors() const { return impl_->parsed.tensors; }

const TensorInfo* File::find_tensor(std::string_view name) const {
    auto it = impl_->tensor_index.find(name);
    return it == impl_->tensor_index.end() ? nullptr : &impl_->parsed.tensors[it->second];
}

const uint8_t* File::tensor_data(const TensorInfo& info) const {
    if (!impl_->tensor_bytes.empty()) {
        const std::vector<TensorInfo>& all = impl_->parsed.tensors;
        if (&info < all.data() || &info >= all.data() + all.size()) {
            throw Error(ErrorCode::internal, impl_->path + ": tensor '" + info.name + "' is not one of this File's");
        }
        return impl_->tensor_bytes[static_cast<size_t>(&info - all.data())];
    }
    // Bounds were checked at parse time for this file's infos; re-check so an info from another file
    // (or a modified copy) cannot point outside this mapping.
    const uint64_t begin = impl_->parsed.data_offset + info.offset;
    if (begin < info.offset || begin > impl_->size || info.n_bytes > impl_->size - begin) {
        throw Error(ErrorCode::internal, impl_->path + ": tensor '" + info.name +
                                             "' does not lie inside this file; was it taken from another File?");
    }
    return impl_->data + begin;
}

const uint8_t* File::bytes() const { return impl_->data; }
size_t File::size() const { return impl_->size; }

}  // namespace kvstash::gguf
