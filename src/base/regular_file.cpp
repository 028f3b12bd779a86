#include "base/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvstash/error.h"

namespace kvstash::regular_file {

namespace {

[[noreturn]] void fail(std::string_view what, const std::string& path, const std::string& why) {
    throw Error(ErrorCode::io, "cannot open " + std::string(what) + " '" + path + "': " + why);
}

}  // namespace

std::string_view describe_file_type(unsigned mode) {
    switch (mode & S_IFMT) {
        case S_IFDIR: return "a directory";
        case S_IFIFO: return "a FIFO (named pipe)";
        case S_IFCHR: return "a character device";
        case S_IFBLK: return "a block device";
        case S_IFSOCK: return "a socket";
        default: return "not a regular file";
    }
}

int open_for_reading(const std::string& path, std::string_view what) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) fail(what, path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int saved = errno;
        ::close(fd);
        fail(what, path, std::string("stat: ") + std::strerror(saved));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(what, path, "it is " + std::string(describe_file_type(st.st_mode)) + ", not a regular file");
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        const int saved = errno;
        ::close(fd);
        fail(what, path, std::string("fcntl: ") + std::strerror(saved));
    }
    return fd;
}

std::string read_all(const std::string& path, std::string_view what) {
    const int fd = open_for_reading(path, what);
    std::string content;
    char buffer[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int saved = errno;
            ::close(fd);
            throw Error(ErrorCode::io, "cannot read " + std::string(what) + " '" + path + "': " + std::strerror(saved));
        }
        if (n == 0) break;
        content.append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
    return content;
}

}  // namespace kvstash::regular_file
