// Progress of long prompt processing on stderr ("prompt: 1536/6356 tokens, 812 tok/s"), shown only
// when stderr is a terminal and the input is long enough to be worth it.
#pragma once

#include <chrono>
#include <cstdint>

#include "kvstash/evaluator.h"

namespace kvstash::cli {

class PromptProgress {
public:
    // Installs itself as the evaluator's progress callback, timing from now; removes it when destroyed.
    // Construct it right before the eval() it reports on.
    PromptProgress(Evaluator& evaluator, const char* label);
    ~PromptProgress();
    PromptProgress(const PromptProgress&) = delete;
    PromptProgress& operator=(const PromptProgress&) = delete;

private:
    void update(int64_t done, int64_t total);

    Evaluator& evaluator_;
    const char* label_;
    bool enabled_;
    bool shown_ = false;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace kvstash::cli
