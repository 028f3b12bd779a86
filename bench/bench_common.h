// Small helpers shared by the benchmark programs (timing, summaries, logits hashes, random prompts).
// Header-only; the benchmarks do not link the test support library.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU time of the calling thread: on a shared machine, unlike wall time, it does not count the time
// the thread waited for a core (single-threaded kernel timings use it).
inline double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// CPU time of all the process's threads (spin-waits included).
inline double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// {"median", "min", "max", "runs"} of the values.
inline nlohmann::json summary(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    const double median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
    return {{"median", median}, {"min", values.front()}, {"max", values.back()}, {"runs", values}};
}

inline int32_t argmax(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// FNV-1a over the bytes of the logits: equal hashes across runs / thread counts = bitwise equal logits.
inline uint64_t fnv1a(std::span<const float> logits) {
    uint64_t h = 1469598103934665603ull;
    const auto* p = reinterpret_cast<const uint8_t*>(logits.data());
    for (size_t i = 0; i < logits.size_bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

inline std::string hex(uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// `count` token ids below n_vocab from a xorshift sequence seeded by `seed`.
inline std::vector<int32_t> random_tokens(int64_t count, int64_t n_vocab, uint64_t seed) {
    std::vector<int32_t> out;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < count; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(n_vocab)));
    }
    return out;
}

}  // namespace bench
