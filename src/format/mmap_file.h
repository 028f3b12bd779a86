// A read-only, private memory mapping of a whole file. Move-only; unmapped in the destructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvstash {

class MappedFile {
public:
    // Maps `path` read-only (MAP_PRIVATE). Throws Error(io) naming the path and strerror(errno) when
    // it cannot be opened, is not a regular file, or cannot be mapped. An empty file maps to
    // data() == nullptr, size() == 0 (mmap cannot map zero bytes); callers reject it as they see fit.
    static MappedFile open(const std::string& path);

    MappedFile() = default;
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }

private:
    void unmap() noexcept;

    const uint8_t* data_ = nullptr;
    size_t size_ = 0;  // bytes mapped
};

}  // namespace kvstash
