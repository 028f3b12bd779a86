// Named states (POST /v1/states, uploads; the interface is named_states.h): kept in memory and, with a directory, as
// state files <dir>/<name>.kvs that outlive the process (found again at start-up and loaded on first use). Handlers
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

#include "kvstash/adapter.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "server/metrics.h"
#include "server/named_states.h"

namespace kvstash::server {

class StateStore final : public NamedStates {
public:
    // `dir` empty: memory only. Otherwise created if missing, its <name>.kvs files are listed, and the
    // temporary files of dead writers (a server killed mid-save) are removed (base/temp_file_name). `adapters`:
    // the set its states are computed under (a preset's), with which their files are loaded back.
    StateStore(const Model& model, std::string dir, std::shared_ptr<const AdapterSet> adapters = nullptr);

    // valid_state_name (server/state_name.h): safe as a file name, no path traversal.
    static bool valid_name(std::string_view name);

    // Keeps `state` under `name`, replacing any state of that name; with a directory, saves it there
    // first (atomic). Throws Error(io) when the file cannot be written (then nothing changes).
    NamedStateInfo put(const std::string& name, State state) override;
    // The same for an uploaded file. `write_and_load(fd, temp_path)` writes the upload through `fd` into a
    // temporary file (base/atomic_file) and returns load_state's State from it (its full validation), or
    // throws; only then does the file replace <dir>/<name>.kvs (fsync, rename, fsync dir). Without a
    // directory the file, in the system's temp directory, is removed after the load.
    NamedStateInfo put_file(const std::string& name, const UploadWriter& write_and_load) override;
    // A fork of the named state (loaded from its file on first use); nullopt for an unknown name.
    std::optional<State> fork(const std::string& name) override;
    std::optional<NamedStateInfo> info(const std::string& name) override;
    std::vector<NamedStateInfo> list() override;
    bool erase(const std::string& name) override;
    StateStoreTotals totals() override;

    const std::string& dir() const { return dir_; }

    // Called when saving a state finds the disk full (ENOSPC, EDQUOT) with the bytes the state needs; returns
    // the bytes it freed (kvstash serve: the prefix cache's disk tier on the same filesystem). put() then
    // tries once more. Set once, before requests arrive.
    using SpaceReclaimer = std::function<uint64_t(uint64_t bytes)>;
    void set_space_reclaimer(SpaceReclaimer reclaimer) { reclaim_space_ = std::move(reclaimer); }
    std::string file_path(const std::string& name) const { return dir_ + "/" + name + ".kvs"; }

private:
    struct Entry {
        std::shared_ptr<const State> state;  // null while only on disk
        NamedStateInfo info;
    };
    NamedStateInfo store(const std::string& name, State state, uint64_t file_bytes);

    const Model& model_;
    std::shared_ptr<const AdapterSet> adapters_;
    std::string dir_;
    std::mutex mutex_;
    std::map<std::string, Entry> entries_;
    SpaceReclaimer reclaim_space_;
};

}  // namespace kvstash::server
