// One loaded Model (its weights) per model file in a server of several entries: a preset over a served model,
// or two presets over one file, run on the same Model instead of loading the weights again. The cache holds
// weak references: the weights stay as long as any loaded entry holds them (its ServerContext, scheduler and
// requests), and go with the last one. ModelRegistry counts them once in the memory budget by the same key.
//
//   SharedModels shared;
//   auto model = shared.get(model_weights_key(path), [&] { return load(path); });  // loads, or the live one
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kvstash/model.h"

namespace kvstash::server {

// What identifies one model's weights among a server's sources: the file's canonical path (two spellings of
// one file are one key), or a hub reference ("hf:...") as given.
std::string model_weights_key(const std::string& path);

class SharedModels {
public:
    using Load = std::function<std::shared_ptr<const Model>()>;

    // The live Model of `key`, or `load()`'s (kept for the next caller while anyone holds it). Two callers of
    // one key load it once (the second waits); callers of different keys load at the same time. An exception
    // from `load` reaches the caller and leaves nothing cached.
    std::shared_ptr<const Model> get(const std::string& key, const Load& load);

private:
    struct Entry {
        std::mutex load_mutex;
        std::weak_ptr<const Model> model;
    };
    std::mutex mutex_;  // entries_
    std::map<std::string, std::shared_ptr<Entry>> entries_;
};

}  // namespace kvstash::server
