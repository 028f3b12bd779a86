#include "hub/hub_cache.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "base/atomic_file.h"
#include "kvstash/error.h"

namespace fs = std::filesystem;

namespace kvstash::hub {
namespace {

constexpr std::string_view kModelsPrefix = "models--";

// "owner/name" <-> "models--owner--name" (huggingface_hub's repo_folder_name).
std::string folder_name(const std::string& repo) {
    std::string out(kModelsPrefix);
    for (const char c : repo) out += c == '/' ? std::string("--") : std::string(1, c);
    return out;
}

std::optional<std::string> repo_from_folder(const std::string& folder) {
    if (!folder.starts_with(kModelsPrefix)) return std::nullopt;
    std::string rest = folder.substr(kModelsPrefix.size());
    const size_t dashes = rest.find("--");
    if (dashes == std::string::npos) return std::nullopt;
    return rest.substr(0, dashes) + "/" + rest.substr(dashes + 2);
}

std::string trim(std::string text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    return text;
}

}  // namespace

std::string HubCache::repo_dir(const std::string& repo) const { return dir_ + "/" + folder_name(repo); }

std::string HubCache::blob_path(const std::string& repo, const std::string& oid) const {
    return repo_dir(repo) + "/blobs/" + oid;
}

std::string HubCache::snapshot_dir(const std::string& repo, const std::string& commit) const {
    return repo_dir(repo) + "/snapshots/" + commit;
}

std::optional<std::string> HubCache::read_ref(const std::string& repo, const std::string& ref) const {
    std::ifstream file(repo_dir(repo) + "/refs/" + ref);
    std::string commit;
    if (!file || !std::getline(file, commit)) return std::nullopt;
    commit = trim(commit);
    if (commit.empty() || commit.find('/') != std::string::npos || commit.starts_with(".")) return std::nullopt;
    return commit;
}

void HubCache::write_ref(const std::string& repo, const std::string& ref, const std::string& commit) const {
    const std::string dir = repo_dir(repo) + "/refs";
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw Error(ErrorCode::output, "cannot create '" + dir + "': " + ec.message());
    atomic_file::write(
        dir + "/" + ref,
        [&commit](int fd, const std::string& temp) { atomic_file::write_all(fd, commit.data(), commit.size(), temp); },
        atomic_file::Options{.what = "hub cache ref"});
}

std::vector<RepoFile> HubCache::snapshot_files(const std::string& repo, const std::string& commit) const {
    std::vector<RepoFile> files;
    const fs::path root = snapshot_dir(repo, commit);
    std::error_code ec;
    if (!fs::is_directory(root, ec)) return files;
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        std::error_code size_ec;
        if (!it->is_regular_file(size_ec)) continue;  // follows the link; a dangling one is skipped
        const uint64_t size = fs::file_size(it->path(), size_ec);
        if (size_ec) continue;
        files.push_back({it->path().lexically_relative(root).generic_string(), size, {}});
    }
    std::sort(files.begin(), files.end(), [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
    return files;
}

void HubCache::link_snapshot_file(const std::string& repo, const std::string& commit, const std::string& path,
                                  const std::string& oid) const {
    const fs::path link = fs::path(snapshot_dir(repo, commit)) / path;
    std::error_code ec;
    fs::create_directories(link.parent_path(), ec);
    if (ec) throw Error(ErrorCode::output, "cannot create '" + link.parent_path().string() + "': " + ec.message());
    // Relative, as huggingface_hub makes them: the cache folder can be moved.
    const fs::path target = fs::path(blob_path(repo, oid)).lexically_relative(link.parent_path());
    const std::string temp = atomic_file::temp_path_for(link.string());
    fs::create_symlink(target, temp, ec);
    if (!ec) fs::rename(temp, link, ec);
    if (ec) {
        fs::remove(temp);
        throw Error(ErrorCode::output, "cannot link '" + link.string() + "' to its blob: " + ec.message());
    }
}

std::vector<CachedRepo> HubCache::list() const {
    std::vector<CachedRepo> repos;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
        const auto repo = repo_from_folder(entry.path().filename().string());
        if (!repo || !entry.is_directory()) continue;
        CachedRepo r;
        r.repo = *repo;
        std::error_code blob_ec;
        for (const auto& blob : fs::directory_iterator(entry.path() / "blobs", blob_ec)) {
            std::error_code size_ec;
            if (blob.is_regular_file(size_ec)) r.bytes += blob.file_size(size_ec);
        }
        r.commit = read_ref(*repo, "main").value_or("");
        if (r.commit.empty()) {  // a snapshot fetched by commit only: the newest one
            fs::file_time_type newest{};
            std::error_code snap_ec;
            for (const auto& snap : fs::directory_iterator(entry.path() / "snapshots", snap_ec)) {
                std::error_code time_ec;
                const auto time = snap.last_write_time(time_ec);
                if (r.commit.empty() || time > newest) {
                    newest = time;
                    r.commit = snap.path().filename().string();
                }
            }
        }
        if (!r.commit.empty()) {
            for (const RepoFile& f : snapshot_files(*repo, r.commit)) r.files.push_back(f.path);
        }
        repos.push_back(std::move(r));
    }
    std::sort(repos.begin(), repos.end(), [](const CachedRepo& a, const CachedRepo& b) { return a.repo < b.repo; });
    return repos;
}

bool HubCache::remove(const std::string& repo) const {
    const std::string dir = repo_dir(repo);
    std::error_code ec;
    if (!fs::exists(dir, ec)) return false;
    fs::remove_all(dir, ec);
    if (ec) throw Error(ErrorCode::output, "cannot delete '" + dir + "': " + ec.message());
    // huggingface_hub's lock files for the repository.
    fs::remove_all(dir_ + "/.locks/" + fs::path(dir).filename().string(), ec);
    return true;
}

}  // namespace kvstash::hub
