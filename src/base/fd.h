// POSIX file descriptors for small best-effort readers (the prefix cache's disk tier): one owner that
// closes, and a positioned read that retries short reads and EINTR.
#pragma once

#include <cstdint>

namespace kvstash {

// Owns a descriptor (or -1) and closes it when it goes; not copyable.
class Fd {
public:
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd();
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;

    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};

// Reads exactly n bytes at `offset` into `data` (pread: the descriptor's position is not used); false on
// an error or end of file before n bytes.
bool read_all_at(int fd, uint8_t* data, uint64_t n, uint64_t offset);

}  // namespace kvstash
