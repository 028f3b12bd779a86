#include "server/state_store.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include <unistd.h>

#include "base/atomic_file.h"
#include "base/temp_file_name.h"
#include "kvstash/error.h"
#include "kvstash/state_file.h"
#include "server/api_error.h"
#include "server/state_name.h"

namespace fs = std::filesystem;

namespace kvstash::server {

namespace {

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The size of a file just written; 0 if it is already gone (a concurrent delete that did not hold the
// name's lock): never a std::filesystem exception, which would reach the client as a raw 500.
uint64_t file_bytes_of(const std::string& path) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    return ec ? 0 : static_cast<uint64_t>(size);
}

}  // namespace

StateStore::StateStore(const Model& model, std::string dir, std::shared_ptr<const AdapterSet> adapters)
    : model_(model), adapters_(std::move(adapters)), dir_(std::move(dir)) {
    if (dir_.empty()) return;
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) throw Error(ErrorCode::output, "cannot create the state directory '" + dir_ + "': " + ec.message());
    if (const size_t removed = temp_file_name::remove_abandoned(dir_))
        std::fprintf(stderr, "kvstash serve: removed %zu temporary file(s) of interrupted saves in '%s'\n", removed,
                     dir_.c_str());
    for (const auto& file : fs::directory_iterator(dir_, ec)) {
        const fs::path& path = file.path();
        if (path.extension() != ".kvs" || !valid_name(path.stem().string())) continue;
        try {
            const StateFileInfo meta = inspect_state_file(path.string(), Checksums::skip);
            Entry entry;
            entry.info.name = path.stem().string();
            entry.info.n_tokens = meta.n_tokens;
            entry.info.n_ctx = meta.n_ctx;
            entry.info.file_bytes = meta.file_bytes;
            entry.info.has_logits = meta.has_logits;
            entry.info.created =
                std::chrono::duration_cast<std::chrono::seconds>(fs::last_write_time(path).time_since_epoch() -
                                                                 fs::file_time_type::clock::now().time_since_epoch())
                    .count() +
                unix_now();
            entries_.emplace(entry.info.name, std::move(entry));
        } catch (const Error& e) {
            std::fprintf(stderr, "kvstash serve: skipping '%s': %s\n", path.c_str(), e.what());
        }
    }
    if (ec) throw Error(ErrorCode::io, "cannot list the state directory '" + dir_ + "': " + ec.message());
}

bool StateStore::valid_name(std::string_view name) { return valid_state_name(name); }

NamedStateInfo StateStore::store(const std::string& name, State state, uint64_t file_bytes) {
    Entry entry;
    entry.info.name = name;
    entry.info.n_tokens = state.n_tokens();
    entry.info.n_ctx = state.n_ctx();
    entry.info.kv_bytes = state.kv_bytes();
    entry.info.file_bytes = file_bytes;
    entry.info.in_memory = true;
    entry.info.has_logits = !state.last_logits().empty();
    entry.info.created = unix_now();
    entry.state = std::make_shared<const State>(std::move(state));
    std::lock_guard lock(mutex_);
    entries_[name] = entry;
    return entry.info;
}

NamedStateInfo StateStore::put(const std::string& name, State state) {
    uint64_t file_bytes = 0;
    if (!dir_.empty()) {
        try {
            save_state(state, file_path(name));
        } catch (const Error& e) {
            // A full disk shared with the prefix cache's block files: make room (least recently used blocks
            // first) for about the state's file, and try once more; still full, the error stands (507).
            if (!reclaim_space_ || !is_disk_full(e)) throw;
            const uint64_t needed = state.kv_bytes() + state.last_logits().size() * sizeof(float) + (uint64_t{1} << 20);
            if (reclaim_space_(needed) == 0) throw;
            save_state(state, file_path(name));
        }
        file_bytes = file_bytes_of(file_path(name));
    }
    return store(name, std::move(state), file_bytes);
}

NamedStateInfo StateStore::put_file(const std::string& name, const UploadWriter& write_and_load) {
    std::optional<State> state;
    const auto write = [&](int fd, const std::string& temp_path) { state.emplace(write_and_load(fd, temp_path)); };
    if (dir_.empty()) {
        // The file exists for the loader only: no fsync, and removed once loaded (a concurrent upload of the
        // same name may rename over it first; each has loaded its own temporary file by then). The pid keeps
        // other servers (other users) sharing the temp directory out of the way.
        const std::string target =
            (fs::temp_directory_path() / ("kvstash-upload-" + std::to_string(::getpid()) + "-" + name + ".kvs"))
                .string();
        atomic_file::write(target, write, {atomic_file::Durability::none, "uploaded state"});
        std::error_code ec;
        fs::remove(target, ec);
        return store(name, std::move(*state), 0);
    }
    atomic_file::write(file_path(name), write, {atomic_file::Durability::file_and_directory, "uploaded state"});
    return store(name, std::move(*state), file_bytes_of(file_path(name)));
}

std::optional<State> StateStore::fork(const std::string& name) {
    {
        std::lock_guard lock(mutex_);
        auto it = entries_.find(name);
        if (it == entries_.end()) return std::nullopt;
        if (it->second.state) return it->second.state->fork();
    }
    // On disk only: load it (outside the lock: it may take a while), then keep it.
    std::optional<State> loaded;
    try {
        loaded.emplace(load_state(model_, file_path(name), LoadOptions{.adapters = adapters_}));
    } catch (const Error&) {
        std::lock_guard lock(mutex_);
        if (!entries_.contains(name)) return std::nullopt;  // deleted while we read it: unknown, not an error
        throw;
    }
    std::lock_guard lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return std::nullopt;  // deleted meanwhile
    if (!it->second.state) {
        it->second.info.kv_bytes = loaded->kv_bytes();
        it->second.info.in_memory = true;
        it->second.info.has_logits = !loaded->last_logits().empty();
        it->second.state = std::make_shared<const State>(std::move(*loaded));
    }
    return it->second.state->fork();
}

std::optional<NamedStateInfo> StateStore::info(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return std::nullopt;
    return it->second.info;
}

std::vector<NamedStateInfo> StateStore::list() {
    std::lock_guard lock(mutex_);
    std::vector<NamedStateInfo> out;
    for (const auto& [name, entry] : entries_) out.push_back(entry.info);
    return out;
}

bool StateStore::erase(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return false;
    entries_.erase(it);
    if (!dir_.empty()) {
        std::error_code ec;
        fs::remove(file_path(name), ec);
    }
    return true;
}

StateStoreTotals StateStore::totals() {
    std::lock_guard lock(mutex_);
    StateStoreTotals totals;
    totals.states = entries_.size();
    for (const auto& [name, entry] : entries_) {
        if (entry.state) totals.bytes_in_memory += entry.info.kv_bytes;
    }
    return totals;
}

}  // namespace kvstash::server
