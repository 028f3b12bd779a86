// The model cache on disk, in huggingface_hub's layout, so that either program finds what the other fetched:
//   <cache>/models--OWNER--NAME/blobs/<oid>                 each file's bytes once, named by its sha256 (LFS) or
//                                                           Git blob sha1; <oid>.incomplete while downloading
//   <cache>/models--OWNER--NAME/snapshots/<commit>/<path>   relative symlinks to the blobs, one tree per commit
//   <cache>/models--OWNER--NAME/refs/main                   the commit "main" was at when last fetched
// A blob appears only complete and verified (renamed from its .incomplete), and a snapshot link only after
// its blob: a path under snapshots/ is always a whole, checked file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hub/model_ref.h"

namespace kvstash::hub {

struct CachedRepo {
    std::string repo;                // "owner/name"
    std::string commit;              // refs/main, else the newest snapshot; empty when there is none
    uint64_t bytes = 0;              // all its blobs
    std::vector<std::string> files;  // of that snapshot, relative paths
};

class HubCache {
public:
    explicit HubCache(std::string dir) : dir_(std::move(dir)) {}
    const std::string& dir() const { return dir_; }

    std::string repo_dir(const std::string& repo) const;  // <cache>/models--OWNER--NAME
    std::string blob_path(const std::string& repo, const std::string& oid) const;
    std::string snapshot_dir(const std::string& repo, const std::string& commit) const;

    // The commit a ref (a branch: "main") was at when last fetched; none when never fetched.
    std::optional<std::string> read_ref(const std::string& repo, const std::string& ref) const;
    void write_ref(const std::string& repo, const std::string& ref, const std::string& commit) const;

    // The files of a snapshot (sizes of their blobs; no oids), recursively; empty when there is none.
    std::vector<RepoFile> snapshot_files(const std::string& repo, const std::string& commit) const;
    // snapshots/<commit>/<path> -> its blob (a relative symlink, replaced atomically). Error(output) on failure.
    void link_snapshot_file(const std::string& repo, const std::string& commit, const std::string& path,
                            const std::string& oid) const;

    // Every repository of models in the cache, by name.
    std::vector<CachedRepo> list() const;
    // Deletes the repository's folder (every snapshot and blob). False when it is not in the cache.
    bool remove(const std::string& repo) const;

private:
    std::string dir_;
};

}  // namespace kvstash::hub
