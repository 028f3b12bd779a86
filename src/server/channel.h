// What the scheduler thread tells the HTTP handler thread waiting on one request: text pieces per
// choice, each choice's finish, then `done` (or an error). The handler only reads; it may cancel
// (client gone), which the scheduler sees at its next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvstash/state.h"

namespace kvstash::server {

// One generated token's log-probability under the model (log-softmax of the raw logits), with the most
// likely alternatives (most likely first, ties by lower id).
struct TokenLogprob {
    int32_t token = 0;
    double logprob = 0.0;
    std::vector<std::pair<int32_t, double>> top;
};

struct Usage {
    int64_t prompt_tokens = 0;      // tokens the generation started from (a named state's tokens included)
    int64_t cached_tokens = 0;      // of those, tokens not computed for this request (prefix cache, named state)
    int64_t completion_tokens = 0;  // tokens sampled, all choices together
};

struct ChannelEvent {
    enum class Kind { piece, finish, done, error };
    Kind kind = Kind::piece;
    int choice = 0;
    std::string text;                     // piece: complete UTF-8 characters (the last piece may end inside one)
    std::optional<TokenLogprob> logprob;  // piece: the token sampled at this step, when logprobs were asked for
    std::string finish_reason;            // finish: "stop" or "length"
    Usage usage;                          // done
    std::shared_ptr<State> state;         // done, for a prefill job: the prefilled state
    int status = 500;                     // error: HTTP status
    std::string message;                  // error
};

class RequestChannel {
public:
    void push(ChannelEvent event) {
        {
            std::lock_guard lock(mutex_);
            events_.push_back(std::move(event));
        }
        ready_.notify_one();
    }

    // Moves every pending event to `out`; waits up to `timeout` for one. False when none came.
    bool wait(std::vector<ChannelEvent>& out, std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        ready_.wait_for(lock, timeout, [this] { return !events_.empty(); });
        if (events_.empty()) return false;
        while (!events_.empty()) {
            out.push_back(std::move(events_.front()));
            events_.pop_front();
        }
        return true;
    }

    void cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }

private:
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<ChannelEvent> events_;
    std::atomic<bool> cancelled_{false};
};

}  // namespace kvstash::server
