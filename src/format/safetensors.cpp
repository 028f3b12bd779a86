#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/json_depth.h"
#include "format/mmap_file.h"
#include "kvstash/error.h"

namespace kvstash::safetensors {
namespace {

using nlohmann::json;

// safetensors dtype names: the three kvstash computes with, then the others it names when refusing them.
bool dtype_of(const std::string& name, TensorType& type, uint64_t& size) {
    if (name == "F32") return type = TensorType::F32, size = 4, true;
    if (name == "F16") return type = TensorType::F16, size = 2, true;
    if (name == "BF16") return type = TensorType::BF16, size = 2, true;
    return false;
}

bool is_known_dtype(const std::string& name) {
    static const char* const kOthers[] = {"BOOL",    "U8",  "I8",      "I16",     "U16",     "I32",
                                          "U32",     "I64", "U64",     "F64",     "F8_E4M3", "F8_E5M2",
                                          "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};
    return std::any_of(std::begin(kOthers), std::end(kOthers), [&](const char* o) { return name == o; });
}

uint64_t read_u64_le(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

}  // namespace

int64_t TensorInfo::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;  // checked at parse time
    return n;
}

struct File::Impl {
    MappedFile mapping;
    const uint8_t* data = nullptr;
    size_t size = 0;
    std::string path;
    uint64_t data_offset = 0;  // 8 + header length
    std::vector<TensorInfo> tensors;
    std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> index;
    std::map<std::string, std::string> metadata;

    [[noreturn]] void fail(const std::string& what) const {
        throw Error(ErrorCode::bad_format, path + ": not a valid safetensors file: " + what);
    }
    void parse();
    TensorInfo parse_tensor(const std::string& name, const json& entry, uint64_t data_size) const;
};

TensorInfo File::Impl::parse_tensor(const std::string& name, const json& entry, uint64_t data_size) const {
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) fail(where + " is not an object");
    const auto dtype = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string()) fail(where + " has no string 'dtype'");
    if (shape == entry.end() || !shape->is_array()) fail(where + " has no array 'shape'");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
        fail(where + " has no 'data_offsets' [begin, end]");
    }
    TensorInfo t;
    t.name = name;
    uint64_t element_size = 0;
    const std::string dtype_name = dtype->get<std::string>();
    if (!dtype_of(dtype_name, t.type, element_size)) {
        if (is_known_dtype(dtype_name)) {
            throw Error(ErrorCode::unsupported, path + ": " + where + " has dtype " + dtype_name +
                                                    ", which kvstash does not load (supported: F32, F16, BF16)");
        }
        fail(where + " has unknown dtype '" + dtype_name.substr(0, 32) + "'");
    }
    if (shape->size() > kMaxDims) fail(where + " has more than " + std::to_string(kMaxDims) + " dimensions");
    uint64_t n = 1;
    for (const json& d : *shape) {
        if (!d.is_number_unsigned()) fail(where + " has a shape entry that is not a non-negative integer");
        const uint64_t dim = d.get<uint64_t>();
        if (dim > static_cast<uint64_t>(INT64_MAX) || (dim != 0 && n > static_cast<uint64_t>(INT64_MAX) / dim)) {
            fail(where + " has a shape whose element count overflows");
        }
        n *= dim;
        t.shape.push_back(static_cast<int64_t>(dim));
    }
    if (n > UINT64_MAX / element_size) fail(where + " has a shape whose byte size overflows");
    if (!(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
        fail(where + " has data_offsets that are not non-negative integers");
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    if (begin > end) fail(where + " has data_offsets begin " + std::to_string(begin) + " > end " + std::to_string(end));
    if (end > data_size) {
        fail(where + " ends at " + std::to_string(end) + ", past the data section (" + std::to_string(data_size) +
             " bytes)");
    }
    if (end - begin != n * element_size) {
        fail(where + " has " + std::to_string(end - begin) + " bytes, its shape and dtype need " +
             std::to_string(n * element_size));
    }
    t.offset = begin;
    t.n_bytes = end - begin;
    return t;
}

void File::Impl::parse() {
    if (size < 8) fail("shorter than the 8-byte header length");
    const uint64_t header_len = read_u64_le(data);
    if (header_len < 2 || header_len > kMaxHeaderBytes) {
        fail("header length " + std::to_string(header_len) + " is not in [2, " + std::to_string(kMaxHeaderBytes) + "]");
    }
    if (header_len > size - 8) {
        fail("header length " + std::to_string(header_len) + " runs past the end of the file (" + std::to_string(size) +
             " bytes)");
    }
    data_offset = 8 + header_len;
    const std::string_view text(reinterpret_cast<const char*>(data + 8), header_len);
    if (text.front() != '{') fail("the header does not start with '{'");
    if (json_depth::nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
        fail("the header nests deeper than " + std::to_string(kMaxJsonDepth));
    const json header = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (header.is_discarded() || !header.is_object()) fail("the header is not a JSON object");
    const uint64_t data_size = size - data_offset;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            if (!entry.is_object()) fail("__metadata__ is not an object");
            for (const auto& [k, v] : entry.items()) {
                if (!v.is_string()) fail("__metadata__ value '" + k + "' is not a string");
                metadata.emplace(k, v.get<std::string>());
            }
            continue;
        }
        tensors.push_back(parse_tensor(name, entry, data_size));
    }
    // No two tensors share a byte (zero-size tensors occupy none).
    std::vector<const TensorInfo*> by_offset;
    for (const TensorInfo& t : tensors) {
        if (t.n_bytes > 0) by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const TensorInfo& prev = *by_offset[i - 1];
        if (by_offset[i]->offset < prev.offset + prev.n_bytes) {
            fail("tensors '" + prev.name + "' and '" + by_offset[i]->name + "' overlap");
        }
    }
    for (size_t i = 0; i < tensors.size(); ++i) index.emplace(tensors[i].name, i);
}

File::File() : impl_(std::make_unique<Impl>()) {}
File::~File() = default;

std::unique_ptr<File> File::open(const std::string& path) {
    MappedFile mapping = MappedFile::open(path);
    std::unique_ptr<File> file = parse(mapping.data(), mapping.size(), path);
    file->impl_->mapping = std::move(mapping);  // same addresses
    return file;
}

std::unique_ptr<File> File::parse(const uint8_t* data, size_t size, std::string display_name) {
    std::unique_ptr<File> file(new File());
    Impl& impl = *file->impl_;
    impl.data = data;
    impl.size = size;
    impl.path = std::move(display_name);
    impl.parse();
    return file;
}

const std::string& File::path() const { return impl_->path; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }
const std::map<std::string, std::string>& File::metadata() const { return impl_->metadata; }
size_t File::size() const { return impl_->size; }
const uint8_t* File::bytes() const { return impl_->data; }

const TensorInfo* File::find_tensor(std::string_view name) const {
    auto it = impl_->index.find(name);
    return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

const uint8_t* File::tensor_data(const TensorInfo& info) const {
    const uint64_t data_size = impl_->size - impl_->data_offset;
    if (info.offset > data_size || info.n_bytes > data_size - info.offset) {
        throw Error(ErrorCode::internal, impl_->path + ": tensor '" + info.name + "' does not lie inside this file");
    }
    return impl_->data + impl_->data_offset + info.offset;
}

}  // namespace kvstash::safetensors
