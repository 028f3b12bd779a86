// Talking to a Hugging Face-style hub over HTTP(S) (cpp-httplib's client; Debian builds it with OpenSSL):
//   GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true   the commit and every file's size and oid
//   GET {endpoint}/{repo}/resolve/{commit}/{path}                the file; a large one is a 302 to a storage URL
// The token goes to the endpoint only, never to a storage host a redirect leads to (as huggingface_hub).
// Errors are kvstash::Error: io for what the hub or the network answered (404, 401 with what to set, a
// connection that fails), output for the local disk (full, not writable). Nothing here prints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hub/hub_settings.h"
#include "hub/model_ref.h"

namespace kvstash::hub {

struct RepoListing {
    std::string commit;  // 40 hex digits
    std::vector<RepoFile> files;
};

struct DownloadProgress {
    std::string path;      // the file in the repository
    uint64_t done = 0;     // bytes of it on disk now (resumed bytes included)
    uint64_t total = 0;    // its size
    uint64_t resumed = 0;  // bytes that were already there when this download started
};
using ProgressCallback = std::function<void(const DownloadProgress&)>;

// What one download attempt ended with.
enum class TransferResult {
    complete,     // `incomplete_path` holds the whole file (not yet verified)
    interrupted,  // the connection broke; what arrived is kept, a new attempt resumes from it
};

class HubClient {
public:
    explicit HubClient(HubSettings settings);

    RepoListing listing(const std::string& repo, const std::string& revision) const;

    // Appends the rest of `file` (of `repo` at `commit`) to `incomplete_path`, asking for the bytes it lacks
    // (Range); starts over when the server sends the whole file instead. Throws for an HTTP error or a
    // local write failure.
    TransferResult download(const std::string& repo, const std::string& commit, const RepoFile& file,
                            const std::string& incomplete_path, const ProgressCallback& progress) const;

private:
    HubSettings settings_;
};

}  // namespace kvstash::hub
