// File descriptor helpers (fd.h).
#include "base/fd.h"

#include <unistd.h>

#include <cerrno>

namespace kvstash {

Fd::~Fd() {
    if (fd_ >= 0) ::close(fd_);
}

bool read_all_at(int fd, uint8_t* data, uint64_t n, uint64_t offset) {
    while (n > 0) {
        const ssize_t r = ::pread(fd, data, n, static_cast<off_t>(offset));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        data += r;
        n -= static_cast<uint64_t>(r);
        offset += static_cast<uint64_t>(r);
    }
    return true;
}

}  // namespace kvstash
