// Opening a user-given path for reading without letting a special file block or mislead us: the path is
// opened with O_NONBLOCK (opening a FIFO for reading would otherwise wait for a writer forever), checked
// with fstat to be a regular file (not a FIFO, socket, device or directory), and only then switched back
// to blocking reads.
#pragma once

#include <string>
#include <string_view>

namespace kvstash::regular_file {

// A descriptor open for reading (O_CLOEXEC, blocking) on the regular file `path`; the caller closes it.
// Throws Error(io) "cannot open <what> '<path>': <strerror>" when it cannot be opened, and "... is a FIFO
// (named pipe), not a regular file" (or directory, device, socket) for special files, at once.
int open_for_reading(const std::string& path, std::string_view what = "file");

// The whole content of the regular file `path` (see open_for_reading), or Error(io).
std::string read_all(const std::string& path, std::string_view what = "file");

// "a directory", "a FIFO (named pipe)", ... for a st_mode that is not a regular file's.
std::string_view describe_file_type(unsigned mode);

}  // namespace kvstash::regular_file
