// What the routes need of a store of named states (POST /v1/states, uploads), whatever keeps them:
// StateStore (memory, optionally state files in a directory: state_store.h) or RedisStateStore (one
// Redis shared by replicas: state_store_redis.h). Called from many handler threads; a named State is
// never changed after it is stored (requests continue from a fork).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/state.h"
#include "server/metrics.h"
#include "server/state_name_lock.h"

namespace kvstash::server {

struct NamedStateInfo {
    std::string name;
    int64_t n_tokens = 0;
    int64_t n_ctx = 0;
    uint64_t kv_bytes = 0;    // K + V bytes in memory (f16 blocks of 32 tokens)
    uint64_t file_bytes = 0;  // size of the state file (<dir>/<name>.kvs, or the Redis value); 0 if none
    bool in_memory = false;
    bool has_logits = false;
    int64_t created = 0;  // unix seconds
};

class NamedStates {
public:
    virtual ~NamedStates() = default;

    // Serializes the operations on one name in this process: callers that check-then-change a name
    // (create unless it exists, upload, delete) hold it around both. put/put_file/erase do not take it.
    StateNameLocks::Guard lock_name(const std::string& name) { return name_locks_.lock(name); }

    // Keeps `state` under `name`, replacing any state of that name. Throws (then nothing changes).
    virtual NamedStateInfo put(const std::string& name, State state) = 0;
    // The same for an uploaded file: `write_and_load(fd, temp_path)` writes the upload through `fd` into
    // a temporary file and returns load_state's State from it (its full validation), or throws.
    using UploadWriter = std::function<State(int fd, const std::string& temp_path)>;
    virtual NamedStateInfo put_file(const std::string& name, const UploadWriter& write_and_load) = 0;
    // A fork of the named state; nullopt for an unknown name.
    virtual std::optional<State> fork(const std::string& name) = 0;
    virtual std::optional<NamedStateInfo> info(const std::string& name) = 0;
    virtual std::vector<NamedStateInfo> list() = 0;
    virtual bool erase(const std::string& name) = 0;  // false: no such name
    virtual StateStoreTotals totals() = 0;

private:
    StateNameLocks name_locks_;
};

}  // namespace kvstash::server
