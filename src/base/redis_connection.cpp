// RedisConnection over hiredis 0.14's blocking API (redisConnectWithTimeout, redisSetTimeout,
// redisCommandArgv): the timeouts bound every call, so a dead or slow server costs at most one timeout.
#include "base/redis_connection.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <charconv>

#include "kvstash/error.h"

namespace kvstash {
namespace {

timeval to_timeval(int ms) { return timeval{ms / 1000, static_cast<suseconds_t>(ms % 1000) * 1000}; }

[[noreturn]] void bad_url(const std::string& url, const std::string& why) {
    throw Error(ErrorCode::invalid_argument,
                "bad Redis URL '" + url + "': " + why + " (expected redis://[user:password@]host:port[/db])");
}

std::string percent_decode(const std::string& url, std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '%') {
            out += s[i];
            continue;
        }
        unsigned value = 0;
        if (i + 2 >= s.size()) bad_url(url, "a '%' escape needs two hex digits");
        const auto [end, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, value, 16);
        if (ec != std::errc() || end != s.data() + i + 3) bad_url(url, "a '%' escape needs two hex digits");
        out += static_cast<char>(value);
        i += 2;
    }
    return out;
}

int parse_number(const std::string& url, std::string_view s, int max, const char* what) {
    int value = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < 0 || value > max)
        bad_url(url,
                std::string("the ") + what + " '" + std::string(s) + "' is not a number in 0.." + std::to_string(max));
    return value;
}

RedisReply convert(const redisReply* r) {
    RedisReply out;
    switch (r->type) {
        case REDIS_REPLY_NIL: out.kind = RedisReply::Kind::nil; break;
        case REDIS_REPLY_STRING: out.kind = RedisReply::Kind::string; break;
        case REDIS_REPLY_STATUS: out.kind = RedisReply::Kind::status; break;
        case REDIS_REPLY_ERROR: out.kind = RedisReply::Kind::error; break;
        case REDIS_REPLY_INTEGER: out.kind = RedisReply::Kind::integer; break;
        case REDIS_REPLY_ARRAY: out.kind = RedisReply::Kind::array; break;
        default:
            out.kind = RedisReply::Kind::error;
            out.text = "unexpected reply type";
            return out;
    }
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
        out.text.assign(r->str, r->len);
    out.integer = r->integer;
    if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < r->elements; ++i) {
            const redisReply* e = r->element[i];
            // SCAN answers [cursor, [keys...]]: flatten one level (the cursor first).
            if (e->type == REDIS_REPLY_ARRAY) {
                for (size_t j = 0; j < e->elements; ++j)
                    if (e->element[j]->type == REDIS_REPLY_STRING)
                        out.strings.emplace_back(e->element[j]->str, e->element[j]->len);
            } else {
                out.strings.emplace_back(e->type == REDIS_REPLY_STRING ? std::string(e->str, e->len) : std::string());
            }
        }
    }
    return out;
}

}  // namespace

std::string RedisEndpoint::describe() const { return host + ":" + std::to_string(port) + "/" + std::to_string(db); }

RedisEndpoint parse_redis_url(const std::string& url) {
    constexpr std::string_view scheme = "redis://";
    if (url.starts_with("rediss://"))
        bad_url(url,
                "TLS (rediss://) is not supported: Debian's hiredis 0.14 has no TLS; use a TLS tunnel "
                "(stunnel, a service mesh) to a local redis:// port");
    if (!url.starts_with(scheme)) bad_url(url, "it does not start with redis://");
    std::string_view rest = std::string_view(url).substr(scheme.size());
    RedisEndpoint at;
    if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
        const std::string_view db = rest.substr(slash + 1);
        if (!db.empty()) at.db = parse_number(url, db, 1 << 20, "database number");
        rest = rest.substr(0, slash);
    }
    if (const size_t at_sign = rest.rfind('@'); at_sign != std::string_view::npos) {
        const std::string_view userinfo = rest.substr(0, at_sign);
        const size_t colon = userinfo.find(':');
        if (colon == std::string_view::npos) {
            at.password = percent_decode(url, userinfo);  // redis://secret@host: a password alone
        } else {
            at.user = percent_decode(url, userinfo.substr(0, colon));
            at.password = percent_decode(url, userinfo.substr(colon + 1));
        }
        rest = rest.substr(at_sign + 1);
    }
    std::string_view port;
    if (rest.starts_with('[')) {
        const size_t close = rest.find(']');
        if (close == std::string_view::npos) bad_url(url, "an IPv6 address needs its closing ']'");
        at.host = std::string(rest.substr(1, close - 1));
        rest = rest.substr(close + 1);
        if (!rest.empty() && !rest.starts_with(':')) bad_url(url, "expected ':port' after the IPv6 address");
        if (!rest.empty()) port = rest.substr(1);
    } else {
        const size_t colon = rest.rfind(':');
        at.host = std::string(rest.substr(0, colon));
        if (colon != std::string_view::npos) port = rest.substr(colon + 1);
    }
    if (at.host.empty()) bad_url(url, "no host");
    if (!port.empty()) at.port = parse_number(url, port, 65535, "port");
    return at;
}

struct RedisConnection::Context {
    redisContext* c = nullptr;
    ~Context() {
        if (c != nullptr) redisFree(c);
    }
};

RedisConnection::RedisConnection(std::unique_ptr<Context> context) : context_(std::move(context)) {}
RedisConnection::~RedisConnection() = default;

std::unique_ptr<RedisConnection> RedisConnection::open(const RedisEndpoint& at, RedisTimeouts timeouts,
                                                       std::string& why) {
    auto context = std::make_unique<Context>();
    context->c = redisConnectWithTimeout(at.host.c_str(), at.port, to_timeval(timeouts.connect_ms));
    if (context->c == nullptr) {
        why = "cannot allocate a Redis context";
        return nullptr;
    }
    if (context->c->err != 0) {
        why = "cannot connect to Redis at " + at.describe() + ": " + context->c->errstr;
        return nullptr;
    }
    if (redisSetTimeout(context->c, to_timeval(timeouts.io_ms)) != REDIS_OK) {
        why = "cannot set the Redis timeout: " + std::string(context->c->errstr);
        return nullptr;
    }
    std::unique_ptr<RedisConnection> connection(new RedisConnection(std::move(context)));
    if (!at.password.empty()) {
        const RedisReply r = at.user.empty() ? connection->command({"AUTH", at.password})
                                             : connection->command({"AUTH", at.user, at.password});
        if (!r.ok()) {
            why = "Redis at " + at.describe() + " refused AUTH: " + r.text;
            return nullptr;
        }
    }
    if (at.db != 0) {
        const RedisReply r = connection->command({"SELECT", std::to_string(at.db)});
        if (!r.ok()) {
            why = "Redis at " + at.describe() + " refused SELECT: " + r.text;
            return nullptr;
        }
    }
    return connection;
}

RedisReply RedisConnection::command(std::span<const std::string_view> args) {
    if (broken_) return RedisReply{RedisReply::Kind::io_error, "broken connection", 0, {}};
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (const std::string_view a : args) argv.push_back(a.data()), lengths.push_back(a.size());
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(context_->c, static_cast<int>(argv.size()), argv.data(), lengths.data()));
    if (reply == nullptr) {
        broken_ = true;
        return RedisReply{RedisReply::Kind::io_error, context_->c->errstr, 0, {}};
    }
    RedisReply out = convert(reply);
    freeReplyObject(reply);
    return out;
}

}  // namespace kvstash
