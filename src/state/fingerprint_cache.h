// A small on-disk cache of model fingerprints, so that a new process does not re-hash a model file it
// has seen before (hashing reads every weight byte: ~8 ms for 100 MB, ~0.5 s for a 5 GB 8B model).
//
// Location: $KVSTASH_CACHE_DIR, else $XDG_CACHE_HOME/kvstash, else $HOME/.cache/kvstash; file
// "fingerprints", one line per model file: "<device> <inode> <size> <mtime_ns> <32 hex digits>".
// Keyed by file identity: a file that is replaced or modified gets a new inode or mtime and is hashed
// again. Setting KVSTASH_CACHE_DIR to an empty string, or any I/O error, just disables the cache (a
// miss costs one hash, never a wrong answer for an unchanged file). The cache is as trustworthy as the
// user's own home directory: whoever can write it could pair a file identity with another fingerprint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kvstash {

struct FileIdentity {
    uint64_t device = 0, inode = 0, size = 0;
    int64_t mtime_ns = 0;
    auto operator<=>(const FileIdentity&) const = default;
};

std::optional<std::string> fingerprint_cache_lookup(const FileIdentity& id);
void fingerprint_cache_store(const FileIdentity& id, const std::string& hex);

}  // namespace kvstash
