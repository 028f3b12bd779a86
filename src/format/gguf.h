// GGUF v2/v3 reader over a read-only mmap (or a caller-owned memory buffer, for the fuzzer).
// Every offset and size is checked against the file before use: a truncated, corrupted or hostile
// file raises kvstash::Error(bad_format) naming what is wrong; nothing is read out of bounds.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/tensor_type.h"

namespace kvstash::gguf {

enum class ValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

// One metadata value. Scalars are widened into `integer` (all integer types and BOOL), or `real`
// (FLOAT32/FLOAT64); STRING into `string`; ARRAY into `array` (elements of `array_type`).
struct Value {
    ValueType type = ValueType::UINT8;
    int64_t integer = 0;  // for UINT64 values above INT64_MAX see `uinteger`
    uint64_t uinteger = 0;
    double real = 0.0;
    std::string string;
    ValueType array_type = ValueType::UINT8;
    std::vector<Value> array;
};

// "uint32", "string", "array", ... as the GGUF spec names them; "type N" for unknown numbers.
const char* value_type_name(ValueType type);

// Limits the parser enforces on top of the spec (each one raises Error(bad_format) when exceeded).
inline constexpr uint64_t kDefaultAlignment = 32;  // when general.alignment is absent
inline constexpr int kMaxArrayDepth = 8;           // an array of arrays of ... nests at most this deep
inline constexpr uint32_t kMaxTensorDims = 4;      // GGML_MAX_DIMS
// Values held in memory for all metadata together (a Value is ~100 bytes, so this bounds the memory a
// file of 1-byte array elements can make us allocate to ~1.6 GB; real files hold < 1M).
inline constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 24;

struct TensorInfo {
    std::string name;
    std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (fastest) dimension
    TensorType type;            // only supported types; others fail at load with the tensor's name
    uint32_t raw_type;
    uint64_t offset;   // from the start of the data section, aligned
    uint64_t n_bytes;  // size of the tensor's data
    int64_t n_elements() const;
};

class File {
public:
    // Maps and parses `path`. Throws Error(io) if it cannot be opened/mapped, Error(bad_format) if
    // malformed, Error(unsupported) for a tensor of a type kvstash does not handle (message names
    // the tensor and the type).
    static std::unique_ptr<File> open(const std::string& path);
    // Parses a buffer the caller keeps alive for the File's lifetime (used by the fuzzer and tests).
    static std::unique_ptr<File> parse(const uint8_t* data, size_t size, std::string display_name);
    // A File made in memory rather than parsed: a Hugging Face model directory read as the GGUF llama.cpp's
    // converter would make of it (model/hf_dir.h). Tensor i's bytes are at tensor_bytes[i] (checked by the
    // caller), kept alive by `owner`; `size` is the bytes the source occupies on disk. version() is 0.
    static std::unique_ptr<File> assemble(std::string display_name, std::vector<std::pair<std::string, Value>> metadata,
                                          std::vector<TensorInfo> tensors, std::vector<const uint8_t*> tensor_bytes,
                                          std::shared_ptr<const void> owner, size_t size);

    ~File();
    File(const File&) = delete;
    File& operator=(const File&) = delete;

    uint32_t version() const;
    const std::string& path() const;  // or display name
    uint64_t alignment() const;

    // Metadata in file order.
    const std::vector<std::pair<std::string, Value>>& metadata() const;
    const Value* find(std::string_view key) const;

    // Typed accessors. The `require_*` ones throw Error(bad_format) naming the key when it is missing
    // or has the wrong type; the `get_*` ones return nullopt when missing and throw on the wrong type.
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;  // accepts float or integer values
    std::optional<std::string> get_string(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    int64_t require_int(std::string_view key) const;
    double require_float(std::string_view key) const;
    std::string require_string(std::string_view key) const;
    // The elements of an array value; nullptr when the key is missing. Throws Error(bad_format) naming
    // the key if the value is not an array whose elements have `element_type`.
    const std::vector<Value>* get_array(std::string_view key, ValueType element_type) const;

    const std::vector<TensorInfo>& tensors() const;
    const TensorInfo* find_tensor(std::string_view name) const;
    // Pointer to the tensor's bytes (bounds already checked at parse time).
    const uint8_t* tensor_data(const TensorInfo& info) const;

    // Byte offset in the file of the (aligned) data section that TensorInfo::offset counts from.
    uint64_t data_offset() const;

    // The whole mapped file (for fingerprinting); nullptr for an assembled File.
    const uint8_t* bytes() const;
    size_t size() const;

private:
    File();
    void index();  // builds the key and tensor name lookups
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::gguf
