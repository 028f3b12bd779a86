// A preset shares its model's weights (docs/models.md#presets): a model and two presets over it, in one
// `kvstash serve --models DIR`, run on one loaded Model. Measured on the server process itself: the model file
// is mapped once (/proc/PID/maps), the file-backed resident memory (RssFile) does not grow when the presets
// load after the model, /api/ps and `kvstash ps` count the weights once, and a --models-memory budget of one
// and a half models holds all three loaded (each counted alone, the second would push the first out).
// The model is the default one (SmolLM2-135M Q4_1, ~94 MiB): large enough that its weights dwarf the rest.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "e2e/server/server_process.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A field of /proc/PID/status in bytes ("RssFile:    1234 kB").
uint64_t status_bytes(pid_t pid, const std::string& field) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.starts_with(field + ":")) return std::stoull(line.substr(field.size() + 1)) * 1024;
    }
    ADD_FAILURE() << "no " << field << " in /proc/" << pid << "/status";
    return 0;
}

// Bytes of the process's address space that map `file` (every mapping of it, summed).
uint64_t mapped_bytes(pid_t pid, const std::string& file) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
    std::string line;
    uint64_t total = 0;
    while (std::getline(in, line)) {
        // "start-end perms offset dev inode   path"
        const size_t slash = line.find('/');
        if (slash == std::string::npos || line.substr(slash) != file) continue;
        const uint64_t start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
        const uint64_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
        total += end - start;
    }
    return total;
}

void chat(httplib::Client& client, const std::string& model) {
    const json body = {{"model", model},
                       {"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})},
                       {"max_tokens", 2},
                       {"temperature", 0}};
    auto res = client.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
}

json ps(httplib::Client& client) {
    auto res = client.Get("/api/ps");
    if (!res || res->status != 200) throw std::runtime_error("GET /api/ps failed");
    return json::parse(res->body)["models"];
}

TEST(ServerPresetMemory, PresetsShareTheirModelsWeights) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const fs::path dir = fs::temp_directory_path() / ("kvstash_preset_memory_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string model = fs::canonical(default_model_path()).string();
    fs::create_symlink(model, dir / "smol.gguf");
    std::ofstream(dir / "terse.preset.json") << R"({"model": "smol", "system": "Be terse.", "options": {"top_k": 5}})";
    std::ofstream(dir / "loud.preset.json") << R"({"model": "smol", "system": "Shout.", "options": {"top_k": 9}})";
    const uint64_t file_bytes = fs::file_size(model);
    const uint64_t budget = file_bytes + file_bytes / 2;

    ServerProcess server({"--models", dir.string(), "--models-memory", std::to_string(budget), "-t", "2", "--ctx",
                          "256", "--keep-alive", "-1"});
    httplib::Client client = server.client();
    const pid_t pid = server.pid();
    const uint64_t file_rss_before = status_bytes(pid, "RssFile");
    chat(client, "smol");
    const uint64_t file_rss_model = status_bytes(pid, "RssFile");
    const uint64_t rss_model = status_bytes(pid, "VmRSS");
    chat(client, "terse");
    chat(client, "loud");
    const uint64_t file_rss_presets = status_bytes(pid, "RssFile");
    const uint64_t rss_presets = status_bytes(pid, "VmRSS");
    const uint64_t mapped = mapped_bytes(pid, model);
    std::printf(
        "model file %llu bytes; RssFile %llu -> %llu (model) -> %llu (+2 presets); VmRSS %llu -> %llu; "
        "mapped %llu\n",
        static_cast<unsigned long long>(file_bytes), static_cast<unsigned long long>(file_rss_before),
        static_cast<unsigned long long>(file_rss_model), static_cast<unsigned long long>(file_rss_presets),
        static_cast<unsigned long long>(rss_model), static_cast<unsigned long long>(rss_presets),
        static_cast<unsigned long long>(mapped));

    // Mapped once (a page-rounded file's worth), not once per entry.
    EXPECT_GE(mapped, file_bytes);
    EXPECT_LT(mapped, file_bytes + 2 * 4096 * 16);
    // The model's load brought its weights in (so the measure sees them); the presets' brought none again.
    EXPECT_GT(file_rss_model - file_rss_before, file_bytes / 2);
    EXPECT_LT(file_rss_presets - file_rss_model, file_bytes / 8);

    // All three loaded within one and a half models' budget; the weights counted once, on the model's line.
    const json loaded = ps(client);
    ASSERT_EQ(loaded.size(), 3u) << loaded.dump();
    uint64_t total = 0;
    for (const json& m : loaded) {
        total += m["size"].get<uint64_t>();
        if (m["name"] == "smol:latest") {
            EXPECT_FALSE(m.contains("shares_weights_with")) << m.dump();
        } else {
            EXPECT_EQ(m["shares_weights_with"], "smol:latest") << m.dump();
            EXPECT_EQ(m["size"], 0) << m.dump();
        }
    }
    EXPECT_EQ(total, file_bytes);
    auto models = client.Get("/v1/models");
    ASSERT_TRUE(models && models->status == 200);
    for (const json& m : json::parse(models->body)["data"]) {
        if (m["id"] == "smol") {
            EXPECT_FALSE(m["meta"].contains("shares_weights_with")) << m.dump();
        } else {
            EXPECT_EQ(m["meta"]["shares_weights_with"], "smol") << m.dump();
        }
    }
    const ProcessResult listed = run_process({cli_path(), "ps", "--url", server.url()});
    EXPECT_EQ(listed.exit_code, 0) << listed.err;
    EXPECT_NE(listed.out.find("(weights of smol:latest)"), std::string::npos) << listed.out;
    std::printf("%s", listed.out.c_str());

    // Unloading the model alone keeps the weights the presets hold: still mapped once, and they still answer.
    auto res = client.Post("/api/generate", R"({"model": "smol", "keep_alive": 0})", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(ps(client).size(), 2u);
    EXPECT_EQ(mapped_bytes(pid, model), mapped);
    chat(client, "terse");
    chat(client, "smol");  // back on the same weights
    EXPECT_EQ(mapped_bytes(pid, model), mapped);
    server.stop();
    fs::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::test
