#include "server/shared_models.h"

#include <filesystem>
#include <system_error>

namespace kvstash::server {

std::string model_weights_key(const std::string& path) {
    if (path.starts_with("hf:")) return path;
    std::error_code ec;
    const std::filesystem::path canonical = std::filesystem::weakly_canonical(path, ec);
    return ec ? path : canonical.string();
}

std::shared_ptr<const Model> SharedModels::get(const std::string& key, const Load& load) {
    std::shared_ptr<Entry> entry;
    {
        std::lock_guard lock(mutex_);
        std::shared_ptr<Entry>& slot = entries_[key];
        if (!slot) slot = std::make_shared<Entry>();
        entry = slot;
    }
    std::lock_guard load_lock(entry->load_mutex);
    if (std::shared_ptr<const Model> live = entry->model.lock()) return live;
    std::shared_ptr<const Model> loaded = load();
    entry->model = loaded;
    return loaded;
}

}  // namespace kvstash::server
