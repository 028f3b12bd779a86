// One line on stderr per HTTP request (`kvstash serve`): method, route, status, prompt / cached /
// generated tokens where the route knows them, time to first token and duration.
//   text: 2026-11-26T18:50:00.123Z POST /v1/chat/completions 200 prompt=12 cached=0 generated=16 ttft_ms=45.1
//   duration_ms=320.5 json:
//   {"time":"...","method":"POST","route":"/v1/chat/completions","status":200,"prompt_tokens":12,...}
// A field the route does not know is left out. GET /health and GET /metrics (pollers) are logged only
// with --verbose, which also adds the client address and the request body's bytes.
//
// cpp-httplib runs a request's handler, its streaming content provider and its logger on one thread, so
// the handler notes what it learns in a thread-local record that the logger then reads.
#pragma once

#include <cstdint>
#include <string>

#include <httplib.h>

#include "server/server_options.h"

namespace kvstash::server {

// Starts this thread's record: the clock and no tokens known (call first thing for every request).
void request_log_begin();
// Token counts of the request (any left negative stay unknown).
void request_log_tokens(int64_t prompt, int64_t cached, int64_t generated);
// The first generated token reached the handler; later calls keep the first time.
void request_log_first_token();

// The line for one request (no newline), in `format` ("text" or "json").
std::string request_log_line(const std::string& format, bool verbose, const httplib::Request& req,
                             const httplib::Response& res, const std::string& route);
// Writes request_log_line to stderr unless the route is a quiet one and verbose is off.
void request_log_write(const ServerOptions& options, const httplib::Request& req, const httplib::Response& res,
                       const std::string& route);

}  // namespace kvstash::server
