// A real redis-server for tests: started on a free loopback port (no persistence, no config file, its
// working directory a fresh temp dir), stopped (SIGKILL, then reaped) when destroyed or by stop(), and
// restartable on the same port, empty, as a restarted Redis without persistence is.
//
//   if (!RedisServer::installed()) GTEST_SKIP() << RedisServer::kSkipMessage;
//   RedisServer redis;                        // throws std::runtime_error if it does not answer PING
//   options.redis_url = redis.url();          // "redis://127.0.0.1:PORT"
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/redis_connection.h"

namespace kvstash::test {

class RedisServer {
public:
    static constexpr const char* kSkipMessage =
        "redis-server is not installed (Debian package redis-server; scripts/setup.sh installs it)";
    static bool installed();

    // `extra` args after the defaults (e.g. {"--maxmemory", "2mb"}).
    explicit RedisServer(std::vector<std::string> extra = {});
    ~RedisServer();
    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;

    void stop();   // kill -9: as a crash, nothing saved
    void start();  // on the same port; waits until it answers PING (throws after 10 s)
    bool running() const { return pid_ > 0; }
    int port() const { return port_; }
    std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
    // One command on a fresh connection (io_error when it is down).
    RedisReply command(std::initializer_list<std::string_view> args) const;

private:
    std::vector<std::string> extra_;
    std::string dir_;
    int port_ = 0;
    pid_t pid_ = -1;
};

}  // namespace kvstash::test
