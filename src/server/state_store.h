// Named states (POST /v1/states, uploads): kept in memory and, with a directory, as state files
// <dir>/<name>.kvs that outlive the process (found again at start-up and loaded on first use). Handlers
// call it from many threads; a named State is never changed after it is stored (requests continue from
// a fork), so forks and saves only read it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/model.h"
#include "kvstash/state.h"
#include "server/metrics.h"
#include "server/state_name_lock.h"

namespace kvstash::server {

struct NamedStateInfo {
    std::string name;
    int64_t n_tokens = 0;
    int64_t n_ctx = 0;
    uint64_t kv_bytes = 0;    // K + V bytes in memory (f16 blocks of 32 tokens)
    uint64_t file_bytes = 0;  // size of <dir>/<name>.kvs; 0 without a directory
    bool in_memory = false;
    bool has_logits = false;
    int64_t created = 0;  // unix seconds
};

class StateStore {
public:
    // `dir` empty: memory only. Otherwise created if missing, its <name>.kvs files are listed, and the
    // temporary files of dead writers (a server killed mid-save) are removed (base/temp_file_name).
    StateStore(const Model& model, std::string dir);

    // valid_state_name (server/state_name.h): safe as a file name, no path traversal.
    static bool valid_name(std::string_view name);

    // Serializes the operations on one name: callers that check-then-change a name (create unless it
    // exists, upload, delete) hold it around both. put/put_file/erase do not take it themselves.
    StateNameLocks::Guard lock_name(const std::string& name) { return name_locks_.lock(name); }

    // Keeps `state` under `name`, replacing any state of that name; with a directory, saves it there
    // first (atomic). Throws Error(io) when the file cannot be written (then nothing changes).
    NamedStateInfo put(const std::string& name, State state);
    // The same for an uploaded file. `write_and_load(fd, temp_path)` writes the upload through `fd` into a
    // temporary file (base/atomic_file) and returns load_state's State from it (its full validation), or
    // throws; only then does the file replace <dir>/<name>.kvs (fsync, rename, fsync dir). Without a
    // directory the file, in the system's temp directory, is removed after the load.
    using UploadWriter = std::function<State(int fd, const std::string& temp_path)>;
    NamedStateInfo put_file(const std::string& name, const UploadWriter& write_and_load);
    // A fork of the named state (loaded from its file on first use); nullopt for an unknown name.
    std::optional<State> fork(const std::string& name);
    std::optional<NamedStateInfo> info(const std::string& name);
    std::vector<NamedStateInfo> list();
    bool erase(const std::string& name);
    StateStoreTotals totals();

    const std::string& dir() const { return dir_; }
    std::string file_path(const std::string& name) const { return dir_ + "/" + name + ".kvs"; }

private:
    struct Entry {
        std::shared_ptr<const State> state;  // null while only on disk
        NamedStateInfo info;
    };
    NamedStateInfo store(const std::string& name, State state, uint64_t file_bytes);

    const Model& model_;
    std::string dir_;
    std::mutex mutex_;
    std::map<std::string, Entry> entries_;
    StateNameLocks name_locks_;
};

}  // namespace kvstash::server
