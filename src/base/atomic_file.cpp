#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/regular_file.h"
#include "kvstash/error.h"

namespace kvstash::atomic_file {

namespace {

std::string parent_directory(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

[[noreturn]] void fail(const Options& options, const std::string& path, const std::string& step, int saved_errno) {
    throw Error(ErrorCode::output, "cannot save " + options.what + " '" + path + "': " + step + ": " +
                                       std::strerror(saved_errno) + "; any previous file at that path is unchanged");
}

}  // namespace

std::string temp_path_for(const std::string& path) { return temp_file_name::for_target(path); }

void write_all(int fd, const void* data, size_t size, const std::string& what_path) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
        const ssize_t w = ::write(fd, p, size);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            const int saved = w < 0 ? errno : ENOSPC;
            throw Error(ErrorCode::output, "cannot write '" + what_path + "': " + std::strerror(saved));
        }
        p += w;
        size -= static_cast<size_t>(w);
    }
}

namespace {

// rename() would replace a FIFO, device or directory entry (as root, even /dev/full): only regular
// files (or links, which rename replaces, not follows) are ours to replace.
void require_replaceable(const std::string& path, const Options& options) {
    if (struct stat st{}; ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        throw Error(ErrorCode::output, "cannot save " + options.what + " '" + path + "': it is " +
                                           std::string(regular_file::describe_file_type(st.st_mode)) +
                                           ", and only a regular file is replaced");
    }
}

}  // namespace

void check_writable(const std::string& path, const Options& options) {
    require_replaceable(path, options);
    const std::string temp = temp_path_for(path);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) fail(options, path, "creating '" + temp + "'", errno);
    ::close(fd);
    ::unlink(temp.c_str());
}

void write(const std::string& path, const std::function<void(int fd, const std::string& temp_path)>& write_content,
           const Options& options) {
    require_replaceable(path, options);
    if (options.remove_abandoned_temps) {
        const size_t slash = path.find_last_of('/');
        temp_file_name::remove_abandoned(parent_directory(path),
                                         slash == std::string::npos ? path : path.substr(slash + 1));
    }
    const std::string temp = temp_path_for(path);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) fail(options, path, "creating '" + temp + "'", errno);
    try {
        write_content(fd, temp);
        if (options.durability == Durability::file_and_directory && ::fsync(fd) != 0)
            fail(options, path, "syncing '" + temp + "'", errno);
    } catch (...) {
        ::close(fd);
        ::unlink(temp.c_str());
        throw;
    }
    if (::close(fd) != 0) {
        const int saved = errno;
        ::unlink(temp.c_str());
        fail(options, path, "closing '" + temp + "'", saved);
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
        const int saved = errno;
        ::unlink(temp.c_str());
        fail(options, path, "renaming '" + temp + "' over it", saved);
    }
    if (options.durability != Durability::file_and_directory) return;
    // The rename is durable only once the directory entry is on disk.
    const std::string dir = parent_directory(path);
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const int synced = dir_fd >= 0 ? ::fsync(dir_fd) : -1;
    const int saved = errno;
    if (dir_fd >= 0) ::close(dir_fd);
    if (synced != 0 && saved != EINVAL) {  // EINVAL: a file system that cannot sync directories
        throw Error(ErrorCode::output, options.what + " '" + path + "' was written but its directory '" + dir +
                                           "' could not be synced: " + std::strerror(saved));
    }
}

bool try_write(const std::string& path, std::initializer_list<std::string_view> parts, Durability durability) {
    try {
        write(
            path,
            [&](int fd, const std::string& temp) {
                for (std::string_view part : parts) write_all(fd, part.data(), part.size(), temp);
            },
            Options{durability, "file", /*remove_abandoned_temps=*/false});
        return true;
    } catch (const Error&) {
        return false;
    }
}

}  // namespace kvstash::atomic_file
