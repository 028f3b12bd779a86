// RedisClient: connection pool with backoff (see the header).
#include "base/redis_client.h"

#include <algorithm>

namespace kvstash {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{100}, kMaxBackoff{5000};
constexpr size_t kMaxIdle = 8;  // connections kept open between commands

}  // namespace

RedisClient::RedisClient(RedisEndpoint at, RedisTimeouts timeouts) : at_(std::move(at)), timeouts_(timeouts) {}

std::unique_ptr<RedisConnection> RedisClient::take(std::string& why) {
    {
        const std::lock_guard lock(mutex_);
        if (!idle_.empty()) {
            std::unique_ptr<RedisConnection> c = std::move(idle_.back());
            idle_.pop_back();
            return c;
        }
        if (Clock::now() < retry_at_) {
            ++counters_.skipped;
            why = "Redis at " + at_.describe() + " is backing off after: " + last_error_;
            return nullptr;
        }
        // Claim this attempt: other threads skip until it is decided (one connect timeout at most).
        retry_at_ = Clock::now() + std::chrono::milliseconds(timeouts_.connect_ms + timeouts_.io_ms);
    }
    std::unique_ptr<RedisConnection> c = RedisConnection::open(at_, timeouts_, why);
    const std::lock_guard lock(mutex_);
    if (c) {
        ++counters_.connects;
        retry_at_ = {};
        return c;
    }
    ++counters_.connect_errors;
    counters_.connected = false;
    last_error_ = why;
    backoff_ = std::clamp(backoff_ * 2, kFirstBackoff, kMaxBackoff);
    retry_at_ = Clock::now() + backoff_;
    return nullptr;
}

void RedisClient::give_back(std::unique_ptr<RedisConnection> connection, bool failed, const std::string& why) {
    const std::lock_guard lock(mutex_);
    if (failed) {
        // The server is gone or slow: drop every idle connection too (they would fail the same way, each
        // after a timeout) and back off.
        ++counters_.io_errors;
        counters_.connected = false;
        last_error_ = why;
        idle_.clear();
        backoff_ = std::clamp(backoff_ * 2, kFirstBackoff, kMaxBackoff);
        retry_at_ = Clock::now() + backoff_;
        return;
    }
    counters_.connected = true;
    backoff_ = std::chrono::milliseconds{0};
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(connection));
}

RedisReply RedisClient::run(std::span<const std::string_view> args) {
    std::string why;
    std::unique_ptr<RedisConnection> c = take(why);
    if (!c) return RedisReply{RedisReply::Kind::io_error, why, 0, {}};
    RedisReply reply = c->command(args);
    const bool failed = reply.kind == RedisReply::Kind::io_error;
    give_back(std::move(c), failed, failed ? "Redis at " + at_.describe() + ": " + reply.text : std::string());
    return reply;
}

RedisClient::Counters RedisClient::counters() const {
    const std::lock_guard lock(mutex_);
    return counters_;
}

std::string RedisClient::last_error() const {
    const std::lock_guard lock(mutex_);
    return last_error_;
}

}  // namespace kvstash
