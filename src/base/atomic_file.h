// Replacing a file atomically: write a temporary file in the same directory, then rename it over the
// target, so that a reader sees the old file or the new one, never a part of either. A failure at any step
// removes the temporary file and leaves a previous file at the path unchanged.
//
// Temporary files are named by base/temp_file_name ("<dir>/.tmp-<file name>-<pid>-<counter>-<random>"): unique
// per write, hidden, and found by their kTempPrefix. Those of dead writers (a killed process) are removed by
// the next write() to the same target, and by the server's and the prefix cache's startup scans.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include "base/temp_file_name.h"

namespace kvstash::atomic_file {

inline constexpr std::string_view kTempPrefix = temp_file_name::kTempPrefix;

enum class Durability {
    none,                // no fsync: after a crash the new file may be missing or torn (callers that verify content)
    file_and_directory,  // fsync the file before the rename and the directory after it
};

struct Options {
    Durability durability = Durability::file_and_directory;
    // Names the file in error messages: "cannot save <what> '<path>': ...".
    std::string what = "file";
    // Before writing, remove the temporary files that dead writers left for the same target (one listing of
    // the directory; best effort).
    bool remove_abandoned_temps = true;
};

// A new temporary path for `path` (in its directory; see the naming above).
std::string temp_path_for(const std::string& path);

// Writes `path` atomically. `write_content(fd, temp_path)` writes the content through `fd` (open for
// writing, empty; pwrite is fine) and throws on failure. Every other failure throws Error(output) naming
// `path`, the step and strerror; the content writer's exceptions pass through unchanged. Either way the
// temporary file is gone. A directory that cannot be synced after the rename (the file is in place) is
// also an Error(output), except where the file system does not sync directories (EINVAL). A `path` that
// exists and is not a regular file (a FIFO, device, directory) is refused with Error(output), untouched.
void write(const std::string& path, const std::function<void(int fd, const std::string& temp_path)>& write_content,
           const Options& options = {});

// Checks, before any work whose result would be lost, that write(path) can create its temporary file:
// creates one and removes it. Throws the Error(output) write() would (a missing or read-only directory, no
// permission, a `path` that is not a regular file); leaves nothing behind and a previous file unchanged.
void check_writable(const std::string& path, const Options& options = {});

// Writes `parts` one after another to `path` atomically (see write()); false instead of an exception on
// any failure, for best-effort caches (which clean their directories at startup instead of per write).
bool try_write(const std::string& path, std::initializer_list<std::string_view> parts,
               Durability durability = Durability::none);

// Writes all of [data, data + size) to `fd` from its current position, retrying short writes and EINTR;
// throws Error(output) naming `what_path` on failure.
void write_all(int fd, const void* data, size_t size, const std::string& what_path);

}  // namespace kvstash::atomic_file
