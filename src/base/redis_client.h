// A thread-safe Redis client for a cache that must never make a request wait long: a small pool of
// RedisConnections, opened on demand, and after a failure no new connection is tried until a backoff
// has passed (100 ms, doubling to 5 s; reset by the next success), so while Redis is down or slow every
// command fails at once instead of each waiting for a timeout. A restarted Redis is found again by itself.
//
//   RedisClient redis(parse_redis_url(url), {100, 500});
//   RedisReply r = redis.run({"GET", key});   // io_error at once while backing off
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/redis_connection.h"

namespace kvstash {

class RedisClient {
public:
    RedisClient(RedisEndpoint at, RedisTimeouts timeouts);

    // One command on a pooled connection; io_error (with the reason) when none can be had now.
    RedisReply run(std::span<const std::string_view> args);
    RedisReply run(std::initializer_list<std::string_view> args) {
        return run(std::span<const std::string_view>(args.begin(), args.size()));
    }

    struct Counters {
        uint64_t connects = 0;        // connections opened
        uint64_t connect_errors = 0;  // attempts that failed (unreachable, AUTH, SELECT)
        uint64_t io_errors = 0;       // commands that failed on a connection (timeout, reset)
        uint64_t skipped = 0;         // commands failed at once during a backoff
        bool connected = false;       // the last attempt or command succeeded
    };
    Counters counters() const;
    const RedisEndpoint& endpoint() const { return at_; }
    std::string last_error() const;

private:
    using Clock = std::chrono::steady_clock;
    std::unique_ptr<RedisConnection> take(std::string& why);
    void give_back(std::unique_ptr<RedisConnection> connection, bool failed, const std::string& why);

    const RedisEndpoint at_;
    const RedisTimeouts timeouts_;
    mutable std::mutex mutex_;
    std::vector<std::unique_ptr<RedisConnection>> idle_;  // guarded by mutex_
    Clock::time_point retry_at_{};                        // no new connection before this
    std::chrono::milliseconds backoff_{0};
    Counters counters_;
    std::string last_error_;
};

}  // namespace kvstash
