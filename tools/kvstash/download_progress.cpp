#include "kvstash/download_progress.h"

#include <cstdio>

#include "kvstash/common.h"

namespace kvstash::cli {
namespace {

constexpr auto kTerminalInterval = std::chrono::milliseconds(100);
constexpr auto kLogInterval = std::chrono::seconds(5);

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string eta_text(double seconds) {
    if (seconds < 0 || seconds > 360000) return "--:--";
    const auto s = static_cast<long>(seconds + 0.5);
    char text[32];
    if (s >= 3600) {
        std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
    } else {
        std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
    }
    return text;
}

}  // namespace

DownloadProgressBar::DownloadProgressBar() : tty_(stderr_is_tty()) {}

DownloadProgressBar::~DownloadProgressBar() { finish_line(); }

hub::ProgressCallback DownloadProgressBar::callback() {
    return [this](const hub::DownloadProgress& p) { update(p); };
}

void DownloadProgressBar::finish_line() {
    if (line_open_) std::fputs("\n", stderr);
    line_open_ = false;
}

void DownloadProgressBar::update(const hub::DownloadProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    const bool new_file = p.path != file_;
    if (new_file) {
        finish_line();
        file_ = p.path;
        file_start_ = now;
        last_draw_ = now;  // logs: the first line after an interval, not at 0 bytes
        if (p.resumed > 0) {
            std::fprintf(stderr, "%s: resuming at %.1f of %.1f MiB\n", p.path.c_str(), mib(p.resumed), mib(p.total));
        }
    }
    const bool done = p.done == p.total;
    if (!done && !(tty_ && new_file) && now - last_draw_ < (tty_ ? kTerminalInterval : kLogInterval)) return;
    last_draw_ = now;
    const double seconds = std::chrono::duration<double>(now - file_start_).count();
    const double rate = seconds > 0.001 ? mib(p.done - p.resumed) / seconds : 0.0;
    const double eta = rate > 0 ? mib(p.total - p.done) / rate : -1.0;
    const double percent = p.total ? 100.0 * static_cast<double>(p.done) / static_cast<double>(p.total) : 100.0;
    if (tty_) {
        constexpr int width = 24;
        const int filled = static_cast<int>(percent / 100.0 * width);
        std::string bar(static_cast<size_t>(filled), '#');
        bar.resize(width, '.');
        std::fprintf(stderr, "\r\033[K%s [%s] %3.0f%% %.1f/%.1f MiB %.1f MiB/s ETA %s", p.path.c_str(), bar.c_str(),
                     percent, mib(p.done), mib(p.total), rate, eta_text(eta).c_str());
        line_open_ = true;
        if (done) finish_line();
    } else {
        std::fprintf(stderr, "%s: %.1f/%.1f MiB (%.0f%%), %.1f MiB/s%s\n", p.path.c_str(), mib(p.done), mib(p.total),
                     percent, rate, done ? ", done" : (", ETA " + eta_text(eta)).c_str());
    }
    std::fflush(stderr);
}

}  // namespace kvstash::cli
