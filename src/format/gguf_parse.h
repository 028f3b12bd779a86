// The GGUF parser proper: turns a byte range into metadata and checked tensor infos. gguf::File owns
// the bytes and the lookup tables; this file owns the format rules. Internal to src/format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/gguf.h"

namespace kvstash::gguf::detail {

struct ParsedFile {
    uint32_t version = 0;
    uint64_t alignment = kDefaultAlignment;
    uint64_t data_offset = 0;                             // file offset of the aligned data section
    std::vector<std::pair<std::string, Value>> metadata;  // file order, keys unique
    std::vector<TensorInfo> tensors;                      // file order, names unique, bounds checked
};

// Throws Error(bad_format) for malformed input and Error(unsupported) for a v1 / future-version file or
// an unsupported tensor type. Messages start with `display_name`. Reads only [data, data + size).
ParsedFile parse_file(const uint8_t* data, size_t size, const std::string& display_name);

}  // namespace kvstash::gguf::detail
