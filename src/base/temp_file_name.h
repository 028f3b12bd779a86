// Names of the temporary files that base/atomic_file writes beside a target, and the removal of those that
// a dead writer left behind (a process killed between creating the temporary file and renaming it).
//
// A temporary file for "<dir>/<file>" is "<dir>/.tmp-<file>-<pid>-<counter>-<random>": the pid says who
// writes it (so that a later process can tell whether the writer is alive), the counter makes it unique
// among the writes of one process (threads share the pid), and 8 random hex digits keep it unique where
// pids are not (a reused pid, another pid namespace sharing the directory).
//
// "Abandoned" means the writer is known dead (kill(pid, 0) says ESRCH), or, for a temporary name whose pid
// cannot be read, the file is older than kUnparsableTempAge. A live writer's file is never removed: a pid
// that exists (ours included, EPERM included) counts as alive. The pid is only meaningful on this host and
// in this pid namespace: directories shared across hosts or containers should not be written concurrently.
#pragma once

#include <sys/types.h>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace kvstash::temp_file_name {

inline constexpr std::string_view kTempPrefix = ".tmp-";
inline constexpr auto kUnparsableTempAge = std::chrono::hours(1);

// A new temporary path beside `path` (same directory), unique per call.
std::string for_target(const std::string& path);

struct Parsed {
    std::string target;  // the file name (no directory) the temporary file was written for
    pid_t pid = 0;
};
// The target file name and writer pid of a temporary file name (no directory), nullopt when `file_name` is
// not of the form above.
std::optional<Parsed> parse(std::string_view file_name);

// Whether the temporary file `file_name` (no directory), last written `age` ago, was left by a dead writer.
// False for names that do not start with kTempPrefix.
bool is_abandoned(std::string_view file_name, std::chrono::nanoseconds age);

// Removes abandoned temporary files in `dir`; with `target` (a file name, no directory), only those written
// for that target. Best effort: entries that vanish or cannot be removed are skipped. Returns how many were
// removed.
size_t remove_abandoned(const std::string& dir, std::optional<std::string_view> target = std::nullopt);

}  // namespace kvstash::temp_file_name
