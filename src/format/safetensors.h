// safetensors reader over a read-only mmap (or a caller-owned buffer, for the fuzzer and tests).
// Layout: u64 little-endian N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}}, then the data section that the offsets count from.
// Every number is checked before use, as the GGUF reader does: the header length against the file size, each
// tensor's [begin, end) inside the data section, end - begin == product(shape) × dtype size (no overflow), no two
// tensors overlapping. A malformed file raises Error(bad_format) naming what is wrong; a dtype kvstash cannot
// compute with (I8, F64, F8_E4M3, ...) raises Error(unsupported) naming the tensor and the dtype.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/tensor_type.h"

namespace kvstash::safetensors {

inline constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // as the reference implementation
inline constexpr size_t kMaxDims = 8;
inline constexpr size_t kMaxJsonDepth = 16;  // the header nests 3 deep; deeper input is refused before parsing

struct TensorInfo {
    std::string name;
    TensorType type;             // F32, F16 or BF16
    std::vector<int64_t> shape;  // row-major as PyTorch: shape.back() is the contiguous dimension
    uint64_t offset = 0;         // from the start of the data section
    uint64_t n_bytes = 0;
    int64_t n_elements() const;
};

class File {
public:
    // Maps and parses `path`. Error(io) when it cannot be opened or mapped.
    static std::unique_ptr<File> open(const std::string& path);
    // Parses a buffer the caller keeps alive for the File's lifetime.
    static std::unique_ptr<File> parse(const uint8_t* data, size_t size, std::string display_name);

    ~File();
    File(const File&) = delete;
    File& operator=(const File&) = delete;

    const std::string& path() const;
    const std::vector<TensorInfo>& tensors() const;  // in header order
    const TensorInfo* find_tensor(std::string_view name) const;
    const uint8_t* tensor_data(const TensorInfo& info) const;
    const std::map<std::string, std::string>& metadata() const;  // "__metadata__"
    size_t size() const;
    const uint8_t* bytes() const;  // the whole file, size() bytes

private:
    File();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::safetensors
