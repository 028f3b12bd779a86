// The HTTP side of the server's end-to-end tests: one shared `kvstash serve` (started on first use),
// GET/POST helpers that parse the JSON reply, the OpenAI error shape, SSE parsing, Prometheus samples,
// and the CLI run that gives the expected text. Header-only: shared by tests/e2e/server_*_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e/server/server_process.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {

using nlohmann::json;

// The value of an unlabelled Prometheus sample "NAME VALUE" on a line of its own; -1 if absent.
// (Plain parsing rather than std::regex: GCC 12 reports a -Wmaybe-uninitialized false positive inside
// <regex> under optimisation, which -Werror turns into a build failure.)
inline double metric_value(const std::string& metrics, const std::string& name) {
    const std::string key = "\n" + name + " ";
    const size_t at = ("\n" + metrics).find(key);
    if (at == std::string::npos) return -1.0;
    return std::strtod(metrics.c_str() + at + key.size() - 1, nullptr);
}

// One server for most tests (started on first use, stopped at exit).
inline ServerProcess& shared_server() {
    static ServerProcess server({"-t", "2", "--parallel", "8"});
    return server;
}

struct Reply {
    int status = 0;
    json body;
    std::string text;
    httplib::Headers headers;
};

inline Reply post(httplib::Client& client, const std::string& path, const std::string& body,
                  const httplib::Headers& headers = {}) {
    auto res = client.Post(path, headers, body, "application/json");
    Reply r;
    if (!res) return r;
    r.status = res->status;
    r.text = res->body;
    r.headers = res->headers;
    r.body = json::parse(res->body, nullptr, false);
    return r;
}
inline Reply post(httplib::Client& client, const std::string& path, const json& body) {
    return post(client, path, body.dump());
}

inline Reply get(httplib::Client& client, const std::string& path) {
    auto res = client.Get(path);
    Reply r;
    if (!res) return r;
    r.status = res->status;
    r.text = res->body;
    r.body = json::parse(res->body, nullptr, false);
    return r;
}

// Checks the OpenAI error shape and returns the message.
inline std::string error_message(const Reply& r) {
    EXPECT_TRUE(r.body.is_object() && r.body.contains("error")) << r.text;
    if (!r.body.is_object() || !r.body.contains("error")) return {};
    const json& e = r.body["error"];
    EXPECT_TRUE(e.contains("message") && e.contains("type") && e.contains("param") && e.contains("code")) << r.text;
    return e.value("message", "");
}

// Parses an SSE body: the JSON of every "data:" event, and whether it ended with [DONE].
inline std::vector<json> parse_sse(const std::string& body, bool* done) {
    std::vector<json> events;
    *done = false;
    size_t at = 0;
    while (at < body.size()) {
        size_t end = body.find("\n\n", at);
        if (end == std::string::npos) break;
        const std::string event = body.substr(at, end - at);
        at = end + 2;
        EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
        const std::string data = event.substr(6);
        if (data == "[DONE]") {
            *done = true;
            EXPECT_EQ(at, body.size()) << "data after [DONE]";
            break;
        }
        events.push_back(json::parse(data));
    }
    return events;
}

inline std::string generate_cli(const std::vector<std::string>& extra) {
    std::vector<std::string> args{"generate", "-t", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    const ProcessResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out.substr(0, r.out.size() - 1);  // the CLI ends the text with a newline
}

// Tests on the shared server.
class ServerHttp : public ::testing::Test {
protected:
    void SetUp() override {
        KVSTASH_REQUIRE_DEFAULT_MODEL();
        client_.emplace(shared_server().client());
    }
    httplib::Client& client() { return *client_; }
    std::optional<httplib::Client> client_;
};

}  // namespace kvstash::test
