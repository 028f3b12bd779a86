#include "server/model_registry.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "kvstash/error.h"
#include "server/api_error.h"
#include "server/shared_models.h"

namespace kvstash::server {

uint64_t model_file_bytes(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return std::filesystem::file_size(path, ec);
    uint64_t total = 0;
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
        std::error_code size_ec;
        if (entry.is_regular_file(size_ec)) total += entry.file_size(size_ec);
    }
    return total;
}

ModelRegistry::ModelRegistry(std::vector<ModelSource> sources, RegistryOptions options, Loader loader)
    : options_(options), loader_(std::move(loader)) {
    if (sources.empty()) throw Error(ErrorCode::invalid_argument, "no models to serve");
    std::set<std::string> names;
    for (ModelSource& source : sources) {
        if (!names.insert(source.name).second) {
            throw Error(ErrorCode::invalid_argument,
                        "two models are named '" + source.name + "'; rename one of the files (names come from them)");
        }
        auto slot = std::make_unique<Slot>();
        slot->bytes = source.path.starts_with("hf:") ? 0 : model_file_bytes(source.path);
        slot->weights_key = model_weights_key(source.path);
        slot->source = std::move(source);
        slot->keep_alive_s = options_.keep_alive_s;
        slots_.push_back(std::move(slot));
    }
    reaper_ = std::thread([this] { reap(); });
}

ModelRegistry::~ModelRegistry() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    reaper_.join();
    slots_.clear();
}

std::optional<std::string> ModelRegistry::resolve(const std::string& name) const {
    if (name.empty()) return slots_.front()->source.name;
    for (const auto& slot : slots_) {
        if (name == slot->source.name || name == slot->source.name + ":latest") return slot->source.name;
    }
    return std::nullopt;
}

std::shared_ptr<const Preset> ModelRegistry::preset_of(const std::string& name) const {
    const auto resolved = resolve(name);
    if (!resolved) return nullptr;
    for (const auto& slot : slots_) {
        if (slot->source.name == *resolved) return slot->source.preset;
    }
    return nullptr;
}

ModelRegistry::Slot* ModelRegistry::find(const std::string& name) {
    const auto resolved = resolve(name);
    if (!resolved) return nullptr;
    for (const auto& slot : slots_) {
        if (slot->source.name == *resolved) return slot.get();
    }
    return nullptr;
}

std::shared_ptr<LoadedModel> ModelRegistry::lease(Slot& slot) {
    slot.last_used = std::chrono::steady_clock::now();
    std::shared_ptr<LoadedModel> held = slot.loaded;
    // The lease shares nothing with slot.loaded's count but keeps a copy of it: slot.loaded.use_count() > 1
    // while any lease lives. Releasing one restarts the model's idle time.
    return std::shared_ptr<LoadedModel>(held.get(), [this, &slot, held](LoadedModel*) mutable {
        std::lock_guard lock(mutex_);
        slot.last_used = std::chrono::steady_clock::now();
        held.reset();
        wake_.notify_all();
    });
}

uint64_t ModelRegistry::weights_in_use() const {
    std::set<std::string> counted;
    uint64_t total = 0;
    for (const auto& s : slots_) {
        if ((s->loaded || s->loading) && counted.insert(s->weights_key).second) total += s->bytes;
    }
    return total;
}

bool ModelRegistry::weights_in_use_by_another(const Slot& slot) const {
    for (const auto& s : slots_) {
        if (s.get() != &slot && s->weights_key == slot.weights_key && (s->loaded || s->loading)) return true;
    }
    return false;
}

std::vector<std::shared_ptr<LoadedModel>> ModelRegistry::make_room(const Slot& for_slot) {
    std::vector<std::shared_ptr<LoadedModel>> unloaded;
    if (options_.memory_budget_bytes == 0 || weights_in_use_by_another(for_slot)) return unloaded;
    while (weights_in_use() + for_slot.bytes > options_.memory_budget_bytes) {
        // The least recently used weights no request holds: every loaded entry on them idle, none loading.
        // Unloading only some of the entries on one file would free nothing.
        std::string oldest_key;
        std::chrono::steady_clock::time_point oldest_use{};
        std::set<std::string> seen;
        for (const auto& s : slots_) {
            if (!s->loaded || s->weights_key == for_slot.weights_key || !seen.insert(s->weights_key).second) continue;
            bool idle = true;
            std::chrono::steady_clock::time_point last_use{};
            for (const auto& other : slots_) {
                if (other->weights_key != s->weights_key) continue;
                if (other->loading || (other->loaded && other->loaded.use_count() > 1)) idle = false;
                if (other->loaded) last_use = std::max(last_use, other->last_used);
            }
            if (idle && (oldest_key.empty() || last_use < oldest_use)) {
                oldest_key = s->weights_key;
                oldest_use = last_use;
            }
        }
        if (oldest_key.empty()) {
            if (weights_in_use() == 0) break;  // a model larger than the budget alone: load it anyway, by itself
            throw ApiError(503,
                           "no room to load model '" + for_slot.source.name +
                               "' within --models-memory: the loaded models are all serving requests; retry shortly",
                           "", "server_overloaded");
        }
        for (const auto& s : slots_) {
            if (s->weights_key != oldest_key || !s->loaded) continue;
            unloaded.push_back(std::move(s->loaded));
            s->loaded.reset();
        }
    }
    return unloaded;
}

std::shared_ptr<LoadedModel> ModelRegistry::acquire(const std::string& name) {
    Slot* slot = find(name);
    if (!slot) {
        std::string names;
        for (const auto& s : slots_) names += (names.empty() ? "'" : ", '") + s->source.name + "'";
        throw ApiError(404,
                       "model '" + name + "' not found; this server serves " + names + " (GET /v1/models lists them)",
                       "model", "model_not_found");
    }
    std::lock_guard load_lock(slot->load_mutex);
    std::vector<std::shared_ptr<LoadedModel>> unloaded;
    {
        std::lock_guard lock(mutex_);
        if (slot->loaded) return lease(*slot);
        if (!slot->error.empty()) {
            throw ApiError(500, "model '" + slot->source.name + "' could not be loaded: " + slot->error);
        }
        unloaded = make_room(*slot);
        slot->loading = true;
    }
    unloaded.clear();  // their schedulers stop here, outside the lock
    std::unique_ptr<LoadedModel> loaded;
    std::string error;
    try {
        loaded = loader_(slot->source);
    } catch (const std::exception& e) {
        error = e.what();
    }
    std::lock_guard lock(mutex_);
    slot->loading = false;
    if (!loaded) {
        slot->error = error.empty() ? "unknown error" : error;
        throw ApiError(500, "model '" + slot->source.name + "' could not be loaded: " + slot->error);
    }
    if (slot->bytes == 0 && loaded->ctx->model) slot->bytes = model_file_bytes(loaded->ctx->model->path());
    slot->loaded = std::move(loaded);
    return lease(*slot);
}

void ModelRegistry::set_keep_alive(const std::string& name, double seconds) {
    std::lock_guard lock(mutex_);
    if (Slot* slot = find(name)) slot->keep_alive_s = seconds;
    wake_.notify_all();
}

bool ModelRegistry::unload_if_idle(const std::string& name) {
    std::shared_ptr<LoadedModel> unloaded;
    {
        std::lock_guard lock(mutex_);
        Slot* slot = find(name);
        if (!slot) return false;
        if (slot->loaded && slot->loaded.use_count() == 1) unloaded = std::move(slot->loaded);
    }
    return true;
}

void ModelRegistry::reap() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        const auto now = std::chrono::steady_clock::now();
        std::vector<std::shared_ptr<LoadedModel>> idle;
        auto next = now + std::chrono::seconds(1);
        for (const auto& slot : slots_) {
            if (!slot->loaded || slot->keep_alive_s < 0 || slot->loaded.use_count() > 1) continue;
            const auto deadline = slot->last_used + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                        std::chrono::duration<double>(slot->keep_alive_s));
            if (deadline <= now) {
                idle.push_back(std::move(slot->loaded));
                slot->loaded.reset();
            } else {
                next = std::min(next, deadline);
            }
        }
        if (!idle.empty()) {
            lock.unlock();
            idle.clear();  // unloaded outside the lock: a scheduler's thread is joined
            lock.lock();
            continue;
        }
        wake_.wait_until(lock, next);
    }
}

std::vector<ModelStatus> ModelRegistry::status() const {
    std::lock_guard lock(mutex_);
    std::vector<ModelStatus> out;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& slot : slots_) {
        ModelStatus s;
        s.name = slot->source.name;
        s.path = slot->source.path;
        s.bytes = slot->bytes;
        s.error = slot->error;
        if (slot->source.preset) s.preset_model = slot->source.preset->model;
        s.loaded = slot->loaded != nullptr;
        for (const auto& earlier : slots_) {
            if (!s.loaded || earlier == slot) break;
            if (earlier->loaded && earlier->weights_key == slot->weights_key) {
                s.shares_weights_with = earlier->source.name;
                break;
            }
        }
        if (s.loaded) {
            const auto& scheduler = slot->loaded->ctx->scheduler;
            s.n_ctx = scheduler ? scheduler->n_ctx() : 0;
            s.in_flight = static_cast<int>(slot->loaded.use_count() - 1);
            if (s.in_flight == 0 && slot->keep_alive_s >= 0) {
                s.expires_in_s =
                    std::max(0.0, slot->keep_alive_s - std::chrono::duration<double>(now - slot->last_used).count());
            }
        }
        out.push_back(std::move(s));
    }
    return out;
}

}  // namespace kvstash::server
