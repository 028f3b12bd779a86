// One connection to a Redis server (hiredis, Debian libhiredis-dev): connect with a timeout, AUTH and
// SELECT from a redis:// URL, then commands as argument vectors (binary-safe) with a read/write timeout.
//
//   RedisEndpoint at = parse_redis_url("redis://:secret@10.0.0.5:6379/2");
//   std::string why;
//   std::unique_ptr<RedisConnection> c = RedisConnection::open(at, {100, 500}, why);
//   RedisReply r = c->command({"GET", "kvstash:v1:blk:..."});   // r.kind: string, nil, error, io_error, ...
//
// A connection whose command failed with io_error (timeout, reset, protocol error) is broken for good:
// hiredis cannot resynchronise it. Callers drop it and open another (RedisClient does, with backoff).
// Not thread-safe: one thread at a time per connection.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash {

struct RedisEndpoint {
    std::string host = "127.0.0.1";
    int port = 6379;
    std::string user;              // empty: AUTH with the password alone (the default user), when there is one
    std::string password;          // empty: no AUTH
    int db = 0;                    // SELECT db when not 0
    std::string describe() const;  // "host:port/db", never the password (for messages and logs)
};

// redis://[user:password@]host[:port][/db] (user and password may be %XX-escaped; [v6 address] in
// brackets). rediss:// (TLS) is refused: Debian's hiredis 0.14 has no TLS support. Throws
// Error(invalid_argument) saying what is wrong.
RedisEndpoint parse_redis_url(const std::string& url);

struct RedisTimeouts {
    int connect_ms = 100;  // TCP connect (and AUTH/SELECT, under the io timeout)
    int io_ms = 500;       // each command's send and reply
};

struct RedisReply {
    enum class Kind { nil, string, integer, array, status, error, io_error };
    Kind kind = Kind::io_error;
    std::string text;                  // string / status / error (the server's message) / io_error (hiredis')
    long long integer = 0;             // integer
    std::vector<std::string> strings;  // array of strings (nil elements are empty)
    bool ok() const { return kind != Kind::error && kind != Kind::io_error; }
};

class RedisConnection {
public:
    // Null with `why` set when the server cannot be reached in time or refuses AUTH / SELECT.
    static std::unique_ptr<RedisConnection> open(const RedisEndpoint& at, RedisTimeouts timeouts, std::string& why);
    ~RedisConnection();
    RedisConnection(const RedisConnection&) = delete;
    RedisConnection& operator=(const RedisConnection&) = delete;

    RedisReply command(std::span<const std::string_view> args);
    RedisReply command(std::initializer_list<std::string_view> args) {
        return command(std::span<const std::string_view>(args.begin(), args.size()));
    }
    bool broken() const { return broken_; }  // an io_error happened: drop this connection

private:
    struct Context;
    explicit RedisConnection(std::unique_ptr<Context> context);
    std::unique_ptr<Context> context_;
    bool broken_ = false;
};

}  // namespace kvstash
