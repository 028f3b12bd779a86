// The progress of hub downloads on stderr: on a terminal, one line redrawn in place (file, percent, MiB,
// rate, ETA), at most ten times a second; otherwise a plain line every few seconds and one per finished
// file, so that logs stay readable. The hub library reports through a callback and never prints itself.
#pragma once

#include <chrono>
#include <string>

#include "hub/hub_client.h"

namespace kvstash::cli {

class DownloadProgressBar {
public:
    DownloadProgressBar();
    ~DownloadProgressBar();
    DownloadProgressBar(const DownloadProgressBar&) = delete;
    DownloadProgressBar& operator=(const DownloadProgressBar&) = delete;

    hub::ProgressCallback callback();

private:
    void update(const hub::DownloadProgress& p);
    void finish_line();

    bool tty_;
    bool line_open_ = false;
    std::string file_;
    std::chrono::steady_clock::time_point file_start_;
    std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace kvstash::cli
