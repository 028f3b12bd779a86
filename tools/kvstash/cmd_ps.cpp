// kvstash ps: the models a running `kvstash serve` has loaded (its GET /api/ps), as `ollama ps` shows them:
// NAME, SIZE (bytes of the model's files), UNTIL (when an idle model will be unloaded; "in use or kept"
// while it serves requests or has keep-alive -1; "shared" for a preset on weights another line counts), and
// the TOTAL of those sizes. Exits 6 when no server answers at --url.
#include <httplib.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "kvstash/commands.h"
#include "kvstash/error.h"

namespace kvstash::cli {
namespace {

struct PsFlags {
    std::string url = "http://127.0.0.1:8080";
    std::string api_key;
};

std::string human_size(uint64_t bytes) {
    char text[32];
    if (bytes >= (uint64_t{1} << 30)) {
        std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
    } else {
        std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    }
    return text;
}

int ps(const PsFlags& f) {
    httplib::Client client(f.url);
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(30, 0);
    httplib::Headers headers;
    if (!f.api_key.empty()) headers.emplace("Authorization", "Bearer " + f.api_key);
    auto res = client.Get("/api/ps", headers);
    if (!res) {
        std::fprintf(stderr, "kvstash: error: no kvstash serve answers at %s (start one, or give --url)\n",
                     f.url.c_str());
        return 6;
    }
    if (res->status != 200) {
        throw Error(ErrorCode::invalid_argument,
                    "the server at " + f.url + " answered HTTP " + std::to_string(res->status) + ": " + res->body +
                        (res->status == 401 ? " (give --api-key or set $KVSTASH_API_KEY)" : ""));
    }
    const nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
    if (!body.is_object() || !body.contains("models") || !body["models"].is_array()) {
        throw Error(ErrorCode::bad_format, "the server at " + f.url + " did not answer /api/ps as kvstash serve does");
    }
    std::printf("%-40s %12s  %s\n", "NAME", "SIZE", "UNTIL");
    uint64_t total = 0;
    for (const nlohmann::json& m : body["models"]) {
        const std::string until = m.value("expires_at", "");
        const uint64_t size = m.value("size", uint64_t{0});
        total += size;
        // A preset on weights another entry holds: counted once, on that entry's line.
        const std::string shared = m.value("shares_weights_with", "");
        std::printf("%-40s %12s  %s%s\n", m.value("name", "").c_str(),
                    shared.empty() ? human_size(size).c_str() : "shared",
                    until.starts_with("9999") ? "in use or kept" : until.c_str(),
                    shared.empty() ? "" : ("  (weights of " + shared + ")").c_str());
    }
    std::printf("%-40s %12s\n", "TOTAL", human_size(total).c_str());
    return 0;
}

}  // namespace

void register_ps(CLI::App& root, Action& action) {
    auto f = std::make_shared<PsFlags>();
    auto* cmd = root.add_subcommand("ps", "List the models a running kvstash serve has loaded (its GET /api/ps)");
    cmd->add_option("--url", f->url, "the server's address")->capture_default_str();
    cmd->add_option("--api-key", f->api_key, "the server's API key (or set $KVSTASH_API_KEY)")
        ->envname("KVSTASH_API_KEY");
    cmd->callback([&action, f] { action = [f] { return ps(*f); }; });
}

}  // namespace kvstash::cli
