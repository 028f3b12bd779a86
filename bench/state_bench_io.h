// Helpers of kvstash_state_bench: timing, medians, and the file baselines it measures a load against
// (`cat FILE > /dev/null`, a read(2) loop), page-cache eviction, and re-running itself in a fresh process.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kvstash/error.h"

extern char** environ;

namespace state_bench {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

inline double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

inline json summary(std::vector<double> values) {
    if (values.empty()) return nullptr;
    json runs = values;
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    const double median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
    return {{"median", median}, {"min", values.front()}, {"max", values.back()}, {"runs", runs}};
}

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw kvstash::Error(kvstash::ErrorCode::io, "cannot open '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline uint64_t file_size(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw kvstash::Error(kvstash::ErrorCode::io, "cannot stat '" + path + "'");
    return static_cast<uint64_t>(st.st_size);
}

// Fraction of the file's pages in the page cache (mincore on a mapping of it).
inline double resident_fraction(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    const size_t size = file_size(path);
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) return -1;
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> vec((size + page - 1) / page);
    double frac = -1;
    if (::mincore(map, size, vec.data()) == 0) {
        size_t in = 0;
        for (unsigned char c : vec) in += c & 1;
        frac = static_cast<double>(in) / static_cast<double>(vec.size());
    }
    ::munmap(map, size);
    return frac;
}

// Drops the file's pages from the page cache; returns the resident fraction afterwards.
inline double evict(const std::string& path, const std::string& how) {
    if (how == "drop_caches") {
        ::sync();
        std::ofstream dc("/proc/sys/vm/drop_caches");
        dc << "3\n";
        dc.flush();
        if (!dc) throw kvstash::Error(kvstash::ErrorCode::io, "cannot write /proc/sys/vm/drop_caches (needs root)");
    } else {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw kvstash::Error(kvstash::ErrorCode::io, "cannot open '" + path + "'");
        ::fdatasync(fd);  // only clean pages can be dropped (save_state has already synced it)
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
    }
    return resident_fraction(path);
}

// `cat FILE > /dev/null`, spawned and waited for: seconds.
inline double time_cat(const std::string& path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    std::vector<char*> argv{const_cast<char*>("cat"), const_cast<char*>(path.c_str()), nullptr};
    const auto start = Clock::now();
    pid_t pid = 0;
    if (posix_spawnp(&pid, "cat", &fa, nullptr, argv.data(), environ) != 0)
        throw kvstash::Error(kvstash::ErrorCode::io, "cannot run cat");
    int status = 0;
    ::waitpid(pid, &status, 0);
    const double s = seconds_since(start);
    posix_spawn_file_actions_destroy(&fa);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw kvstash::Error(kvstash::ErrorCode::io, "cat failed");
    return s;
}

// read(2) of the whole file into a 1 MiB buffer, in this process: seconds.
inline double time_read(const std::string& path) {
    std::vector<char> buf(1 << 20);
    const auto start = Clock::now();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw kvstash::Error(kvstash::ErrorCode::io, "cannot open '" + path + "'");
    while (::read(fd, buf.data(), buf.size()) > 0) {}
    ::close(fd);
    return seconds_since(start);
}

// Runs `argv` and returns its stdout parsed as JSON.
inline json run_child(const std::vector<std::string>& args) {
    int pipefd[2];
    if (::pipe(pipefd) != 0) throw kvstash::Error(kvstash::ErrorCode::io, "pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ) != 0)
        throw kvstash::Error(kvstash::ErrorCode::io, "cannot re-execute /proc/self/exe");
    posix_spawn_file_actions_destroy(&fa);
    ::close(pipefd[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(pipefd[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw kvstash::Error(kvstash::ErrorCode::internal, "child run failed");
    return json::parse(out);
}

}  // namespace state_bench
