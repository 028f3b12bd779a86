#include "hub/pull.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "hub/digest.h"
#include "hub/hub_cache.h"
#include "kvstash/error.h"

namespace fs = std::filesystem;

namespace kvstash::hub {
namespace {

bool has_blob(const std::string& path, uint64_t size) {
    std::error_code ec;
    return fs::is_regular_file(path, ec) && fs::file_size(path, ec) == size && !ec;
}

// A model directory is whole when the shards its index names are all there.
bool directory_complete(const std::string& dir, const Selection& selection) {
    std::set<std::string> present;
    for (const RepoFile& f : selection.files) present.insert(f.path);
    const std::string index = dir + "/model.safetensors.index.json";
    if (!present.count("model.safetensors.index.json")) return true;
    try {
        std::ifstream file(index);
        const auto json = nlohmann::json::parse(file);
        for (const auto& [tensor, shard] : json.at("weight_map").items()) {
            if (!present.count(shard.get<std::string>())) return false;
        }
    } catch (const nlohmann::json::exception&) {
        return false;
    }
    return true;
}

// One file into the cache: its blob (downloaded, resumed, verified) and its snapshot link.
uint64_t fetch_file(const HubClient& client, const HubCache& cache, const std::string& repo, const std::string& commit,
                    const RepoFile& file, const ProgressCallback& progress, int& downloaded) {
    const std::string blob = cache.blob_path(repo, file.oid);
    uint64_t fetched = 0;
    if (!has_blob(blob, file.size)) {
        std::error_code ec;
        fs::create_directories(fs::path(blob).parent_path(), ec);
        if (ec)
            throw Error(ErrorCode::output, "cannot create the hub cache folder '" + cache.dir() + "': " + ec.message());
        const std::string incomplete = blob + ".incomplete";  // huggingface_hub's name: either resumes the other's
        const uint64_t before = fs::exists(incomplete, ec) ? fs::file_size(incomplete, ec) : 0;
        TransferResult result = TransferResult::interrupted;
        for (int attempt = 0; attempt < kMaxAttempts && result != TransferResult::complete; ++attempt) {
            result = client.download(repo, commit, file, incomplete, progress);
        }
        if (result != TransferResult::complete) {
            throw Error(ErrorCode::io, "the connection to the hub broke " + std::to_string(kMaxAttempts) +
                                           " times while fetching " + file.path + " of " + repo +
                                           "; run the pull again: it resumes from the " +
                                           std::to_string(fs::file_size(incomplete, ec) >> 20) + " MiB fetched");
        }
        const DigestKind kind = digest_kind_of(file.oid);
        const std::string digest = digest_file(incomplete, kind, file.size);
        if (digest != file.oid) {
            fs::remove(incomplete, ec);  // corrupt: resuming it would keep the bad bytes
            throw Error(ErrorCode::bad_format, std::string(kind == DigestKind::sha256 ? "sha256" : "Git blob sha1") +
                                                   " mismatch for " + file.path + " of " + repo + ": the hub lists " +
                                                   file.oid + ", the download has " + digest +
                                                   "; the file was discarded, nothing was installed; pull again");
        }
        fs::rename(incomplete, blob, ec);
        if (ec) throw Error(ErrorCode::output, "cannot rename '" + incomplete + "' to its blob: " + ec.message());
        fetched = file.size - std::min(before, file.size);
        ++downloaded;
    }
    cache.link_snapshot_file(repo, commit, file.path, file.oid);
    return fetched;
}

}  // namespace

std::optional<PulledModel> find_cached_model(const ModelRef& ref, const HubSettings& settings) {
    const HubCache cache(settings.cache_dir);
    std::optional<std::string> commit = cache.read_ref(ref.repo, "main");
    if (!commit) {
        for (const CachedRepo& r : cache.list()) {
            if (r.repo == ref.repo && !r.commit.empty()) commit = r.commit;
        }
    }
    if (!commit) return std::nullopt;
    const std::vector<RepoFile> files = cache.snapshot_files(ref.repo, *commit);
    if (files.empty()) return std::nullopt;
    Selection selection;
    try {
        selection = select_model_files(files, ref);
    } catch (const Error&) {
        return std::nullopt;  // what the cache holds is not this model (another quantization, say)
    }
    const std::string dir = fs::absolute(cache.snapshot_dir(ref.repo, *commit)).string();
    if (selection.model_path.empty() && !directory_complete(dir, selection)) return std::nullopt;
    PulledModel out;
    out.repo = ref.repo;
    out.commit = *commit;
    out.model_path = selection.model_path.empty() ? dir : dir + "/" + selection.model_path;
    out.files_total = static_cast<int>(selection.files.size());
    return out;
}

PulledModel pull_model(const ModelRef& ref, const HubSettings& settings, const ProgressCallback& progress) {
    if (settings.offline) {
        if (auto cached = find_cached_model(ref, settings)) return *cached;
        throw Error(ErrorCode::io,
                    "HF_HUB_OFFLINE is set and the hub cache (" + settings.cache_dir + ") does not hold " + ref.repo +
                        (ref.selector.empty() ? "" : ":" + ref.selector) + "; unset HF_HUB_OFFLINE to download it");
    }
    const HubClient client(settings);
    const HubCache cache(settings.cache_dir);
    const RepoListing listing = client.listing(ref.repo, "main");
    const Selection selection = select_model_files(listing.files, ref);
    PulledModel out;
    out.repo = ref.repo;
    out.commit = listing.commit;
    out.files_total = static_cast<int>(selection.files.size());
    for (const RepoFile& file : selection.files) {
        out.bytes_downloaded +=
            fetch_file(client, cache, ref.repo, listing.commit, file, progress, out.files_downloaded);
    }
    cache.write_ref(ref.repo, "main", listing.commit);
    const std::string dir = fs::absolute(cache.snapshot_dir(ref.repo, listing.commit)).string();
    out.model_path = selection.model_path.empty() ? dir : dir + "/" + selection.model_path;
    return out;
}

}  // namespace kvstash::hub
