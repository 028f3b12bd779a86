#include "server/request_log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace kvstash::server {
namespace {

using Clock = std::chrono::steady_clock;

struct RequestRecord {
    Clock::time_point start = Clock::now();
    std::chrono::system_clock::time_point wall = std::chrono::system_clock::now();
    int64_t prompt = -1;
    int64_t cached = -1;
    int64_t generated = -1;
    std::optional<Clock::time_point> first_token;
};

thread_local RequestRecord record;

double ms_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
}

// Milliseconds with 0.1 ms resolution (keeps the line short).
double round_ms(double ms) { return static_cast<double>(static_cast<int64_t>(ms * 10.0 + 0.5)) / 10.0; }

std::string utc_time(std::chrono::system_clock::time_point t) {
    const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
    const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&seconds, &tm);
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(millis));
    return buffer;
}

std::string format_ms(double ms) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.1f", ms);
    return buffer;
}

}  // namespace

void request_log_begin() { record = RequestRecord{}; }

void request_log_tokens(int64_t prompt, int64_t cached, int64_t generated) {
    if (prompt >= 0) record.prompt = prompt;
    if (cached >= 0) record.cached = cached;
    if (generated >= 0) record.generated = generated;
}

void request_log_first_token() {
    if (!record.first_token) record.first_token = Clock::now();
}

std::string request_log_line(const std::string& format, bool verbose, const httplib::Request& req,
                             const httplib::Response& res, const std::string& route) {
    const double duration = round_ms(ms_between(record.start, Clock::now()));
    // Negative: no token was generated.
    const double ttft = record.first_token ? round_ms(ms_between(record.start, *record.first_token)) : -1.0;
    if (format == "json") {
        nlohmann::ordered_json line = {
            {"time", utc_time(record.wall)}, {"method", req.method}, {"route", route}, {"status", res.status}};
        if (record.prompt >= 0) line["prompt_tokens"] = record.prompt;
        if (record.cached >= 0) line["cached_tokens"] = record.cached;
        if (record.generated >= 0) line["generated_tokens"] = record.generated;
        if (ttft >= 0) line["ttft_ms"] = ttft;
        line["duration_ms"] = duration;
        if (verbose) {
            line["path"] = req.path;
            line["client"] = req.remote_addr;
            line["body_bytes"] = req.body.size();
        }
        return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    }
    std::string line = utc_time(record.wall) + " " + req.method + " " + route + " " + std::to_string(res.status);
    if (record.prompt >= 0) line += " prompt=" + std::to_string(record.prompt);
    if (record.cached >= 0) line += " cached=" + std::to_string(record.cached);
    if (record.generated >= 0) line += " generated=" + std::to_string(record.generated);
    if (ttft >= 0) line += " ttft_ms=" + format_ms(ttft);
    line += " duration_ms=" + format_ms(duration);
    if (verbose) {
        // The path is the caller's text: quoted by JSON rules so that it cannot break the line.
        line += " path=" + dump_json(req.path) + " client=" + req.remote_addr +
                " body_bytes=" + std::to_string(req.body.size());
    }
    return line;
}

void request_log_write(const ServerOptions& options, const httplib::Request& req, const httplib::Response& res,
                       const std::string& route) {
    if (!options.verbose && (route == "/health" || route == "/metrics")) return;
    const std::string line = request_log_line(options.log_format, options.verbose, req, res, route) + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);  // one write per line: lines of threads do not interleave
}

}  // namespace kvstash::server
