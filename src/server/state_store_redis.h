// Named states in one Redis shared by replicas (`kvstash serve --state-store redis://...`): a state
// created or uploaded through one replica is listed, used, downloaded and deleted through any other.
//
// Each state is one Redis hash "kvstash:state:v1:<model fingerprint hex>:<name>" with the fields
//   file  the state file's bytes (kvstash/state_file.h: checksummed, model-fingerprinted)
//   info  JSON {n_tokens, n_ctx, file_bytes, has_logits, created}
//   gen   a random id, new with every put (so a replica knows its loaded copy is current)
// written by one HSET (atomic: readers see the old state or the new one). Every State kept comes from
// load_state on those bytes, so a value is validated exactly as an uploaded file is (a corrupt or
// foreign value is refused with the loader's message). Replicas keep forks' sources in memory by gen.
//
// Redis down or slow: the state routes answer 503 (state_store_unavailable) after at most the
// timeouts; other requests go on. Name races follow the file store: operations on one name are
// serialized in each process (NamedStates::lock_name); between replicas the last write wins, and a
// delete racing a use is a 404 or the old state, never a torn one.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/redis_client.h"
#include "kvstash/adapter.h"
#include "kvstash/model.h"
#include "server/named_states.h"

namespace kvstash::server {

class RedisStateStore final : public NamedStates {
public:
    // Throws Error(invalid_argument) for a bad URL; Redis need not be up yet. `adapters`: the set its states are
    // computed under (a preset's); its fingerprint is in every key, so other sets never see these states.
    RedisStateStore(const Model& model, const std::string& url, RedisTimeouts timeouts,
                    std::shared_ptr<const AdapterSet> adapters = nullptr);

    NamedStateInfo put(const std::string& name, State state) override;
    NamedStateInfo put_file(const std::string& name, const UploadWriter& write_and_load) override;
    std::optional<State> fork(const std::string& name) override;
    std::optional<NamedStateInfo> info(const std::string& name) override;
    std::vector<NamedStateInfo> list() override;
    bool erase(const std::string& name) override;
    StateStoreTotals totals() override;

    std::string key_of(const std::string& name) const { return prefix_ + name; }

private:
    struct Loaded {
        std::string gen;
        std::shared_ptr<const State> state;
    };
    // HSETs the file at `path` (a state file whose State is `state`) under `name`.
    NamedStateInfo store(const std::string& name, const std::string& path, State state);
    RedisReply run(std::initializer_list<std::string_view> args);  // throws ApiError(503) on io errors
    NamedStateInfo with_local(NamedStateInfo info);

    const Model& model_;
    std::shared_ptr<const AdapterSet> adapters_;
    RedisClient client_;
    const std::string prefix_;  // "kvstash:state:v1:<fingerprint>:" (with adapters: "<fingerprint>+<adapters>:")
    std::mutex mutex_;
    std::map<std::string, Loaded> loaded_;  // guarded by mutex_
};

}  // namespace kvstash::server
