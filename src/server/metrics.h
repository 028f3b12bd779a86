// Server counters, rendered as Prometheus text at GET /metrics. Written by the scheduler and the HTTP
// handlers from many threads: counters are atomics, the per-route map and the throughput window take a
// mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "kvstash/prefix_cache.h"

namespace kvstash::server {

struct StateStoreTotals {
    uint64_t states = 0;
    uint64_t bytes_in_memory = 0;  // KV bytes of named states held in memory
};

class Metrics {
public:
    void count_request(const std::string& route, int status);
    // Prompt tokens of one admitted request: computed now vs taken from the prefix cache / a named state.
    void count_prompt(int64_t computed, int64_t reused);
    // Tokens sampled in one scheduler step (all sequences), for the totals and the tok/s window.
    void count_generated(int64_t tokens);
    void count_step(int64_t sequences, int64_t tokens);
    void count_cancelled() { cancelled_.fetch_add(1); }
    // One sequence's speculative decode step: guesses verified, and kept.
    void count_speculation(int64_t drafted, int64_t accepted) {
        drafted_.fetch_add(static_cast<uint64_t>(drafted));
        accepted_.fetch_add(static_cast<uint64_t>(accepted));
    }

    std::atomic<int64_t> queue_depth{0};
    std::atomic<int64_t> active_sequences{0};

    std::string render(const PrefixCacheStats& cache, const StateStoreTotals& states) const;

private:
    double decode_tokens_per_second() const;  // over the last window_ (10 s)

    mutable std::mutex mutex_;
    std::map<std::pair<std::string, int>, uint64_t> requests_;
    std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent_;  // (step time, tokens sampled)
    std::atomic<uint64_t> prompt_computed_{0}, prompt_reused_{0}, generated_{0}, steps_{0}, step_sequences_{0},
        step_tokens_{0}, cancelled_{0}, drafted_{0}, accepted_{0};
    const std::chrono::seconds window_{10};
};

}  // namespace kvstash::server
