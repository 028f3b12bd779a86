// RedisStateStore (see the header): state files as Redis hash fields, loaded through load_state.
#include "server/state_store_redis.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/json_depth.h"
#include "kvstash/error.h"
#include "kvstash/state_file.h"
#include "server/api_error.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace kvstash::server {
namespace {

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string random_gen() {
    static std::mutex mutex;
    static std::mt19937_64 rng(std::random_device{}());
    const std::lock_guard lock(mutex);
    return std::to_string(rng());
}

// A scratch path in the system's temp directory (hidden, unique across threads and processes).
std::string scratch_path() {
    return atomic_file::temp_path_for((fs::temp_directory_path() / "kvstash-redis-state.kvs").string());
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::string bytes{std::istreambuf_iterator<char>(in), {}};
    if (!in.good() && !in.eof()) throw Error(ErrorCode::io, "cannot read back the state file '" + path + "'");
    return bytes;
}

struct RemovedOnExit {
    std::string path;
    ~RemovedOnExit() {
        std::error_code ec;
        fs::remove(path, ec);
    }
};

NamedStateInfo info_from(const std::string& name, const std::string& text) {
    NamedStateInfo info;
    info.name = name;
    if (json_depth::nesting_depth(text, json_depth::kMaxJsonDepth) > json_depth::kMaxJsonDepth) return info;
    const json j = json::parse(text, nullptr, false);
    if (!j.is_object()) return info;
    info.n_tokens = j.value("n_tokens", int64_t{0});
    info.n_ctx = j.value("n_ctx", int64_t{0});
    info.file_bytes = j.value("file_bytes", uint64_t{0});
    info.has_logits = j.value("has_logits", false);
    info.created = j.value("created", int64_t{0});
    return info;
}

}  // namespace

namespace {

// "kvstash:state:v1:<model fingerprint>:", with adapters "kvstash:state:v1:<model fingerprint>+<adapters>:".
std::string key_prefix(const Model& model, const AdapterSet* adapters) {
    std::string prefix = "kvstash:state:v1:";
    prefix += model_fingerprint(model);
    if (adapters != nullptr && !adapters->empty()) {
        prefix += '+';
        prefix += adapters->fingerprint();
    }
    prefix += ':';
    return prefix;
}

}  // namespace

RedisStateStore::RedisStateStore(const Model& model, const std::string& url, RedisTimeouts timeouts,
                                 std::shared_ptr<const AdapterSet> adapters)
    : model_(model),
      adapters_(std::move(adapters)),
      client_(parse_redis_url(url), timeouts),
      prefix_(key_prefix(model, adapters_.get())) {}

RedisReply RedisStateStore::run(std::initializer_list<std::string_view> args) {
    RedisReply reply = client_.run(args);
    if (reply.kind == RedisReply::Kind::io_error || reply.kind == RedisReply::Kind::error) {
        throw ApiError(503, "the named-state store is unavailable (" + reply.text + "); try again", "",
                       "state_store_unavailable");
    }
    return reply;
}

NamedStateInfo RedisStateStore::with_local(NamedStateInfo info) {
    const std::lock_guard lock(mutex_);
    if (const auto it = loaded_.find(info.name); it != loaded_.end()) {
        info.in_memory = true;
        info.kv_bytes = it->second.state->kv_bytes();
    }
    return info;
}

NamedStateInfo RedisStateStore::store(const std::string& name, const std::string& path, State state) {
    const std::string bytes = read_file(path);
    NamedStateInfo info;
    info.name = name;
    info.n_tokens = state.n_tokens();
    info.n_ctx = state.n_ctx();
    info.kv_bytes = state.kv_bytes();
    info.file_bytes = bytes.size();
    info.in_memory = true;
    info.has_logits = !state.last_logits().empty();
    info.created = unix_now();
    const std::string meta = json{
        {"n_tokens", info.n_tokens},
        {"n_ctx", info.n_ctx},
        {"file_bytes", info.file_bytes},
        {"has_logits", info.has_logits},
        {"created",
         info.created}}.dump();
    const std::string gen = random_gen();
    run({"HSET", key_of(name), "file", bytes, "info", meta, "gen", gen});
    const std::lock_guard lock(mutex_);
    loaded_[name] = Loaded{gen, std::make_shared<const State>(std::move(state))};
    return info;
}

NamedStateInfo RedisStateStore::put(const std::string& name, State state) {
    const RemovedOnExit scratch{scratch_path()};
    save_state(state, scratch.path);
    return store(name, scratch.path, std::move(state));
}

NamedStateInfo RedisStateStore::put_file(const std::string& name, const UploadWriter& write_and_load) {
    const RemovedOnExit scratch{scratch_path()};
    std::optional<State> state;
    // The upload is written and validated (load_state) in a scratch file, then that file's bytes go to Redis.
    atomic_file::write(scratch.path,
                       [&](int fd, const std::string& temp_path) { state.emplace(write_and_load(fd, temp_path)); },
                       {atomic_file::Durability::none, "uploaded state"});
    return store(name, scratch.path, std::move(*state));
}

std::optional<State> RedisStateStore::fork(const std::string& name) {
    const RedisReply gen = run({"HGET", key_of(name), "gen"});
    if (gen.kind != RedisReply::Kind::string) {
        const std::lock_guard lock(mutex_);
        loaded_.erase(name);  // deleted through another replica
        return std::nullopt;
    }
    {
        const std::lock_guard lock(mutex_);
        if (const auto it = loaded_.find(name); it != loaded_.end() && it->second.gen == gen.text)
            return it->second.state->fork();
    }
    // Created or replaced through another replica: load its file (the loader's full validation).
    const RedisReply both = run({"HMGET", key_of(name), "gen", "file"});
    if (both.strings.size() != 2 || both.strings[1].empty()) return std::nullopt;
    const RemovedOnExit scratch{scratch_path()};
    {
        std::ofstream out(scratch.path, std::ios::binary | std::ios::trunc);
        out.write(both.strings[1].data(), static_cast<std::streamsize>(both.strings[1].size()));
        if (!out) throw Error(ErrorCode::io, "cannot write a scratch copy of the named state '" + name + "'");
    }
    auto state = std::make_shared<const State>(load_state(model_, scratch.path, LoadOptions{.adapters = adapters_}));
    const std::lock_guard lock(mutex_);
    loaded_[name] = Loaded{both.strings[0], state};
    return state->fork();
}

std::optional<NamedStateInfo> RedisStateStore::info(const std::string& name) {
    const RedisReply reply = run({"HGET", key_of(name), "info"});
    if (reply.kind != RedisReply::Kind::string) return std::nullopt;
    return with_local(info_from(name, reply.text));
}

std::vector<NamedStateInfo> RedisStateStore::list() {
    std::vector<NamedStateInfo> out;
    std::string cursor = "0";
    const std::string pattern = prefix_ + "*";
    do {
        const RedisReply page = run({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
        if (page.strings.empty()) break;
        cursor = page.strings[0];
        for (size_t i = 1; i < page.strings.size(); ++i) {
            const std::string name = page.strings[i].substr(prefix_.size());
            if (auto info = this->info(name)) out.push_back(*info);  // deleted meanwhile: left out
        }
    } while (cursor != "0");
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return out;
}

bool RedisStateStore::erase(const std::string& name) {
    const RedisReply reply = run({"DEL", key_of(name)});
    const std::lock_guard lock(mutex_);
    loaded_.erase(name);
    return reply.integer == 1;
}

StateStoreTotals RedisStateStore::totals() {
    StateStoreTotals totals;
    // /metrics must answer while Redis is down: the count is what this replica holds then.
    try {
        totals.states = list().size();
    } catch (const ApiError&) {}
    const std::lock_guard lock(mutex_);
    if (totals.states == 0) totals.states = loaded_.size();
    for (const auto& [name, loaded] : loaded_) totals.bytes_in_memory += loaded.state->kv_bytes();
    return totals;
}

}  // namespace kvstash::server
