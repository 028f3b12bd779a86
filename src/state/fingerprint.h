// A model's identity for state files: XXH3-128 over what determines its computation — every tensor
// (name, type, shape, data), the architecture's hyper-parameters and the tokenizer vocabulary — and
// nothing that does not (file name, general.name, chat template, other general.* metadata).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kvstash/model.h"

namespace kvstash {

namespace gguf {
class File;
}

struct ModelFingerprint {
    std::array<uint8_t, 16> bytes{};  // XXH3-128 in canonical (big-endian) byte order
    std::string hex() const;          // 32 lowercase hex digits
    bool operator==(const ModelFingerprint&) const = default;
};

// Hashes the file (uncached): about 5 ms per 100 MB when the file is in the page cache.
ModelFingerprint compute_model_fingerprint(const gguf::File& file);

// The fingerprint of a loaded model, hashed once per model file: cached by file identity (device,
// inode, size, mtime in ns) of model.path(), in memory and on disk (state/fingerprint_cache.h), so
// later processes skip the hash. Thread-safe.
ModelFingerprint cached_model_fingerprint(const Model& model);

}  // namespace kvstash
