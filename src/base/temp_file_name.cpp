#include "base/temp_file_name.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <random>

namespace fs = std::filesystem;

namespace kvstash::temp_file_name {

namespace {

// 32 random bits, drawn once per process (seeded from the OS) and mixed with the counter per call.
uint32_t random_bits() {
    static std::atomic<uint64_t> state{(uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()};
    // splitmix64 over an atomic counter: thread-safe without a lock.
    uint64_t z = state.fetch_add(0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<uint32_t>(z ^ (z >> 31));
}

template <typename T>
bool parse_number(std::string_view text, int base, T& out) {
    if (text.empty()) return false;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
    return ec == std::errc() && end == text.data() + text.size();
}

// Splits off the last "-<field>" of `rest`; false when there is none.
bool pop_field(std::string_view& rest, std::string_view& field) {
    const size_t dash = rest.rfind('-');
    if (dash == std::string_view::npos) return false;
    field = rest.substr(dash + 1);
    rest = rest.substr(0, dash);
    return true;
}

bool pid_is_dead(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

std::string for_target(const std::string& path) {
    static std::atomic<uint64_t> counter{0};
    const size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    char random_hex[9];
    std::snprintf(random_hex, sizeof random_hex, "%08x", random_bits());
    return dir + std::string(kTempPrefix) + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
           "-" + random_hex;
}

std::optional<Parsed> parse(std::string_view file_name) {
    if (!file_name.starts_with(kTempPrefix)) return std::nullopt;
    std::string_view rest = file_name.substr(kTempPrefix.size());
    std::string_view random_hex, counter, pid_text;
    if (!pop_field(rest, random_hex) || !pop_field(rest, counter) || !pop_field(rest, pid_text)) return std::nullopt;
    uint32_t random_value = 0;
    uint64_t counter_value = 0;
    Parsed parsed;
    if (random_hex.size() != 8 || !parse_number(random_hex, 16, random_value) ||
        !parse_number(counter, 10, counter_value) || !parse_number(pid_text, 10, parsed.pid) || parsed.pid <= 0 ||
        rest.empty())
        return std::nullopt;
    parsed.target = std::string(rest);
    return parsed;
}

bool is_abandoned(std::string_view file_name, std::chrono::nanoseconds age) {
    if (!file_name.starts_with(kTempPrefix)) return false;
    const std::optional<Parsed> parsed = parse(file_name);
    if (parsed) return pid_is_dead(parsed->pid);
    return age > kUnparsableTempAge;  // an older naming, or a writer we cannot identify
}

size_t remove_abandoned(const std::string& dir, std::optional<std::string_view> target) {
    size_t removed = 0;
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    const auto now = fs::file_time_type::clock::now();
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        std::error_code entry_ec;
        const std::string name = it->path().filename().string();
        if (!name.starts_with(kTempPrefix)) continue;
        if (target) {
            const std::optional<Parsed> parsed = parse(name);
            if (!parsed || parsed->target != *target) continue;
        }
        // symlink_status: a link named like a temp file is removed as a link, never followed.
        if (!fs::is_regular_file(it->symlink_status(entry_ec)) || entry_ec) continue;
        const auto mtime = it->last_write_time(entry_ec);
        if (entry_ec || !is_abandoned(name, now - mtime)) continue;
        if (fs::remove(it->path(), entry_ec) && !entry_ec) ++removed;
    }
    return removed;
}

}  // namespace kvstash::temp_file_name
