#include "state/fingerprint_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/atomic_file.h"
#include "base/regular_file.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

// Past this size the file is rewritten with only its newest half (a bound under any use).
constexpr std::uintmax_t max_cache_bytes = 64 * 1024;

std::optional<std::filesystem::path> cache_file() {
    if (const char* dir = std::getenv("KVSTASH_CACHE_DIR")) {
        if (*dir == '\0') return std::nullopt;
        return std::filesystem::path(dir) / "fingerprints";
    }
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
        return std::filesystem::path(xdg) / "kvstash" / "fingerprints";
    if (const char* home = std::getenv("HOME"); home && *home)
        return std::filesystem::path(home) / ".cache" / "kvstash" / "fingerprints";
    return std::nullopt;
}

std::string key_of(const FileIdentity& id) {
    std::ostringstream s;
    s << id.device << ' ' << id.inode << ' ' << id.size << ' ' << id.mtime_ns << ' ';
    return s.str();
}

bool is_hex32(const std::string& s) {
    if (s.size() != 32) return false;
    for (char c : s) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
}

}  // namespace

std::optional<std::string> fingerprint_cache_lookup(const FileIdentity& id) {
    const auto path = cache_file();
    if (!path) return std::nullopt;
    std::istringstream in;
    try {
        in.str(regular_file::read_all(path->string(), "fingerprint cache"));  // a FIFO there: no wait
    } catch (const Error&) {
        return std::nullopt;
    }
    const std::string key = key_of(id);
    std::optional<std::string> found;
    for (std::string line; std::getline(in, line);) {
        if (line.size() == key.size() + 32 && line.compare(0, key.size(), key) == 0) {
            std::string hex = line.substr(key.size());
            if (is_hex32(hex)) found = std::move(hex);  // the last entry wins
        }
    }
    return found;
}

void fingerprint_cache_store(const FileIdentity& id, const std::string& hex) {
    const auto path = cache_file();
    if (!path || !is_hex32(hex)) return;
    std::error_code ec;
    std::filesystem::create_directories(path->parent_path(), ec);
    if (ec) return;
    const std::string line = key_of(id) + hex + "\n";
    if (std::filesystem::file_size(*path, ec) > max_cache_bytes && !ec) {
        // Keep the newest half, written atomically (temp file + rename).
        std::string all;
        try {
            all = regular_file::read_all(path->string(), "fingerprint cache");
        } catch (const Error&) {
            return;
        }
        const size_t cut = all.find('\n', all.size() / 2);
        const std::string kept = cut == std::string::npos ? std::string() : all.substr(cut + 1);
        atomic_file::try_write(path->string(), {kept, line}, atomic_file::Durability::none);
        return;
    }
    // One append of a short line: concurrent writers do not interleave within a line.
    const int fd = ::open(path->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    [[maybe_unused]] const ssize_t written = ::write(fd, line.data(), line.size());
    ::close(fd);
}

}  // namespace kvstash
