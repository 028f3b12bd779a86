#include "kvstash/progress.h"

#include <cstdio>

#include "kvstash/common.h"

namespace kvstash::cli {

constexpr int64_t min_tokens_for_progress = 256;

PromptProgress::PromptProgress(Evaluator& evaluator, const char* label)
    : evaluator_(evaluator), label_(label), enabled_(stderr_is_tty()), start_(std::chrono::steady_clock::now()) {
    if (!enabled_) return;
    evaluator_.set_progress([this](int64_t done, int64_t total) { update(done, total); });
}

PromptProgress::~PromptProgress() {
    if (!enabled_) return;
    evaluator_.set_progress({});
    if (shown_) std::fputs("\r\033[K", stderr);  // clear the line
}

void PromptProgress::update(int64_t done, int64_t total) {
    if (total < min_tokens_for_progress) return;
    shown_ = true;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "\r\033[K%s: %lld/%lld tokens", label_, static_cast<long long>(done),
                 static_cast<long long>(total));
    if (seconds > 0.05) std::fprintf(stderr, ", %.0f tok/s", static_cast<double>(done) / seconds);
    std::fflush(stderr);
}

}  // namespace kvstash::cli
