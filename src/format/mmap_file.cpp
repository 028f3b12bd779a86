#include "format/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/regular_file.h"
#include "kvstash/error.h"

namespace kvstash {

namespace {

[[noreturn]] void throw_io(const std::string& path, const char* what, int saved_errno) {
    throw Error(ErrorCode::io, "cannot " + std::string(what) + " '" + path + "': " + std::strerror(saved_errno));
}

// Closes the descriptor on every path out of open(); the mapping stays valid after close.
struct FdCloser {
    int fd;
    ~FdCloser() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

MappedFile MappedFile::open(const std::string& path) {
    // Refuses a FIFO, device or directory before anything can block on it (base/regular_file).
    const int fd = regular_file::open_for_reading(path);
    FdCloser closer{fd};

    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_io(path, "stat", errno);

    MappedFile file;
    if (st.st_size == 0) return file;
    static_assert(sizeof(size_t) >= sizeof(st.st_size), "kvstash maps whole files: needs a 64-bit size_t");
    const size_t size = static_cast<size_t>(st.st_size);
    void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) throw_io(path, "mmap", errno);
    file.data_ = static_cast<const uint8_t*>(addr);
    file.size_ = size;
    return file;
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        unmap();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void MappedFile::unmap() noexcept {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
}

}  // namespace kvstash
