// Fetching a model into the hub cache, or finding it there:
//
//   const auto settings = kvstash::hub::HubSettings::from_environment();
//   const auto model = kvstash::hub::pull_model(kvstash::hub::parse_model_ref("owner/name:Q8_0"), settings,
//   on_progress); kvstash::Model::load(model.model_path);
//
// pull_model asks the hub which commit "main" is at and fetches the chosen files the cache lacks: each into
// blobs/<oid>.incomplete (resumed with a Range request when an earlier pull, or huggingface_hub, left one;
// up to kMaxAttempts connections per file), verified against the hub's sha256 / Git sha1, then renamed to
// its blob and linked into the snapshot; refs/main moves to the commit when every file is there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "hub/hub_client.h"
#include "hub/hub_settings.h"
#include "hub/model_ref.h"

namespace kvstash::hub {

inline constexpr int kMaxAttempts = 5;

struct PulledModel {
    std::string repo;
    std::string commit;
    std::string model_path;  // absolute: the GGUF file, or the snapshot directory of a model directory
    uint64_t bytes_downloaded = 0;
    int files_downloaded = 0;
    int files_total = 0;
};

// See above. Offline (settings.offline): find_cached_model, or Error(io) saying the model is not cached.
PulledModel pull_model(const ModelRef& ref, const HubSettings& settings, const ProgressCallback& progress);

// The model as the cache holds it at refs/main (or the newest snapshot), without the network; none when the
// cache does not hold it whole.
std::optional<PulledModel> find_cached_model(const ModelRef& ref, const HubSettings& settings);

}  // namespace kvstash::hub
