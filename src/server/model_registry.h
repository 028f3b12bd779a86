// The models of a server started with several (--models DIR, repeated -m): each a ModelSlot, loaded on the
// first request that names it and unloaded when idle past its keep-alive or when the memory budget needs room
// for another (least recently used first). A request holds a lease (a shared_ptr to the loaded model) from its
// dispatch until its response is written, so an unload never cuts a request: only a model no request holds is
// unloaded. A model that fails to load keeps its error and answers every request with it; the others serve on.
// Entries over one model file (a model and its presets) share its loaded weights (server/shared_models.h): the
// memory budget and status() count them once, and they are unloaded only when none of those entries is loaded.
//
//   ModelRegistry registry(sources, {.keep_alive_s = 300, .memory_budget_bytes = 8 << 30}, load);
//   std::shared_ptr<LoadedModel> lease = registry.acquire("qwen");   // ApiError 404 / 500 / 503
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/preset.h"
#include "server/route_table.h"
#include "server/server_context.h"

namespace kvstash::server {

struct ModelSource {
    std::string name;  // the name requests use ("model": NAME, or NAME:latest on Ollama's routes)
    std::string path;  // what -m takes: a GGUF, a model directory, hf:OWNER/NAME[:QUANT]
    // A preset's (server/preset.h): its model loaded under the preset's name, with its defaults. Null: a model.
    std::shared_ptr<const Preset> preset = nullptr;
};

// A loaded model: its context (model, scheduler, caches, named states) and its routes bound to it.
struct LoadedModel {
    std::unique_ptr<ServerContext> ctx;
    RouteTable routes;
};

struct RegistryOptions {
    double keep_alive_s = 300;         // idle seconds before unloading (negative: never)
    uint64_t memory_budget_bytes = 0;  // bytes of model files loaded at once (0: no limit)
};

// What /v1/models, /api/tags and /api/ps show of one model.
struct ModelStatus {
    std::string name;
    std::string path;
    uint64_t bytes = 0;  // the model's files
    bool loaded = false;
    std::string error;                   // why it could not be loaded (empty: none)
    int64_t n_ctx = 0;                   // loaded only
    std::optional<double> expires_in_s;  // loaded and idle: seconds until unloaded (none: never, or in use)
    int in_flight = 0;                   // requests holding it
    std::string preset_model;            // a preset's model (empty: not a preset)
    // Loaded on weights another loaded entry holds (the first such in the server's order): its name. This
    // entry's weights are counted there, once (empty: counted here, or not loaded).
    std::string shares_weights_with;
};

class ModelRegistry {
public:
    // Makes a loaded model from a source (throws kvstash::Error when it cannot be loaded).
    using Loader = std::function<std::unique_ptr<LoadedModel>(const ModelSource&)>;

    // Throws Error(invalid_argument) for no sources or two with one name.
    ModelRegistry(std::vector<ModelSource> sources, RegistryOptions options, Loader loader);
    ~ModelRegistry();  // stops the idle reaper, then unloads every model
    ModelRegistry(const ModelRegistry&) = delete;
    ModelRegistry& operator=(const ModelRegistry&) = delete;

    // The model a request names (NAME or NAME:latest; empty: the first source), loaded if it is not.
    // ApiError 404 for an unknown name, 500 for a model that failed to load, 503 when the memory budget
    // has no room (every loaded model is serving requests).
    std::shared_ptr<LoadedModel> acquire(const std::string& name);
    // A request's keep_alive (Ollama's): the model stays loaded that long after its last request.
    void set_keep_alive(const std::string& name, double seconds);
    // Unloads the model now if no request holds it (Ollama's keep_alive 0). False when unknown.
    bool unload_if_idle(const std::string& name);

    std::vector<ModelStatus> status() const;
    // The name a request's model field means (empty: the first source), or none.
    std::optional<std::string> resolve(const std::string& name) const;
    // The preset a request's model field names, or null (a plain model, or an unknown name).
    std::shared_ptr<const Preset> preset_of(const std::string& name) const;

private:
    struct Slot {
        ModelSource source;
        std::string weights_key;  // model_weights_key(source.path): entries with one key share one loaded Model
        uint64_t bytes = 0;
        std::shared_ptr<LoadedModel> loaded;  // null: not loaded
        bool loading = false;
        std::string error;
        double keep_alive_s = 0;
        std::chrono::steady_clock::time_point last_used{};
        std::mutex load_mutex;  // one load at a time per model; other requests for it wait
    };

    Slot* find(const std::string& name);
    std::shared_ptr<LoadedModel> lease(Slot& slot);  // under mutex_; touches last_used when released
    // Under mutex_: takes models out to make room for `for_slot`'s weights unless a loaded entry holds them
    // already (their destruction is the caller's, unlocked). Entries sharing weights go out together.
    std::vector<std::shared_ptr<LoadedModel>> make_room(const Slot& for_slot);
    // Under mutex_: bytes of the distinct weights held by loaded (or loading) entries.
    uint64_t weights_in_use() const;
    bool weights_in_use_by_another(const Slot& slot) const;
    void reap();

    RegistryOptions options_;
    Loader loader_;
    std::vector<std::unique_ptr<Slot>> slots_;
    mutable std::mutex mutex_;  // slots' loaded / loading / error / keep_alive_s / last_used
    std::condition_variable wake_;
    bool stopping_ = false;
    std::thread reaper_;
};

// Bytes of a model's files (a directory: its files together); 0 when it cannot be read.
uint64_t model_file_bytes(const std::string& path);

}  // namespace kvstash::server
