#include "hub/hub_client.h"

#include <fcntl.h>
#include <unistd.h>

#include <httplib.h>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "hub/digest.h"
#include "kvstash/error.h"

namespace kvstash::hub {
namespace {

constexpr int kMaxRedirects = 8;
constexpr size_t kMaxErrorBody = 4096;

// "https://host:port/prefix" -> origin "https://host:port" and path prefix "/prefix" ("" for none).
struct Url {
    std::string origin;
    std::string path;
};

Url split_url(const std::string& url) {
    const size_t scheme = url.find("://");
    if (scheme == std::string::npos || (url.compare(0, scheme, "http") != 0 && url.compare(0, scheme, "https") != 0)) {
        throw Error(ErrorCode::invalid_argument, "'" + url + "' is not an http:// or https:// URL (check HF_ENDPOINT)");
    }
    const size_t slash = url.find('/', scheme + 3);
    if (slash == std::string::npos) return {url, ""};
    return {url.substr(0, slash), url.substr(slash)};
}

// Percent-encodes a path segment's bytes outside RFC 3986's unreserved set ('/' kept between segments).
std::string encode_path(const std::string& path) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (const unsigned char c : path) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

std::unique_ptr<httplib::Client> make_client(const std::string& origin) {
    auto client = std::make_unique<httplib::Client>(origin);
    client->set_connection_timeout(15, 0);
    client->set_read_timeout(60, 0);
    client->set_follow_location(false);  // redirects are followed here: the token must not leave the hub
    return client;
}

std::string header(const httplib::Headers& headers, const char* name) {
    for (const auto& [key, value] : headers) {
        if (strcasecmp(key.c_str(), name) == 0) return value;
    }
    return {};
}

std::string normalize_etag(std::string etag) {
    if (etag.starts_with("W/")) etag.erase(0, 2);
    if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
    return etag;
}

[[noreturn]] void throw_unreachable(const std::string& endpoint, httplib::Error error) {
    std::string why = httplib::to_string(error);
    if (error == httplib::Error::SSLConnection || error == httplib::Error::SSLServerVerification) {
        why += "; the TLS connection failed (are the CA certificates installed: Debian's ca-certificates?)";
    }
    throw Error(ErrorCode::io, "cannot reach the model hub at " + endpoint + " (" + why +
                                   "); check the network and HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use only "
                                   "models already in the cache");
}

// The hub's answer to a request that failed, as an Error that says what to do.
[[noreturn]] void throw_http_error(int status, const httplib::Headers& headers, const std::string& body,
                                   const std::string& what, const std::string& repo, bool have_token) {
    const std::string code = header(headers, "X-Error-Code");
    std::string message = header(headers, "X-Error-Message");
    if (message.empty()) {
        try {
            const auto json = nlohmann::json::parse(body);
            if (json.is_object() && json.contains("error") && json["error"].is_string()) message = json["error"];
        } catch (const nlohmann::json::exception&) {
            message = body.substr(0, 200);
        }
    }
    const std::string hub_says = message.empty() ? "" : " (the hub says: " + message + ")";
    if (status == 401 || status == 403) {
        throw Error(ErrorCode::io,
                    "the hub refused access to " + repo + " (HTTP " + std::to_string(status) + ")" + hub_says + ": " +
                        (have_token ? "the token in HF_TOKEN (or $HF_HOME/token) cannot read it; check that it is "
                                      "valid and that you accepted the model's terms on its page"
                                    : "it is private or gated, or does not exist; set HF_TOKEN to an access token "
                                      "(https://huggingface.co/settings/tokens) that can read it"));
    }
    if (status == 404) {
        if (code == "EntryNotFound") throw Error(ErrorCode::io, what + " is not in " + repo + hub_says);
        if (code == "RevisionNotFound") throw Error(ErrorCode::io, repo + " has no such revision" + hub_says);
        throw Error(ErrorCode::io, "no repository " + repo + " on the hub (HTTP 404)" + hub_says +
                                       "; check the name (OWNER/NAME, as on the model's page)");
    }
    throw Error(ErrorCode::io,
                "the hub answered HTTP " + std::to_string(status) + " for " + what + hub_says + "; try again later");
}

// Writes what arrives to the .incomplete file; records the first write error instead of throwing through
// cpp-httplib.
struct FileSink {
    int fd = -1;
    std::string path;
    int write_errno = 0;
    ~FileSink() {
        if (fd >= 0) close(fd);
    }
    bool write(const char* data, size_t size) {
        while (size > 0) {
            const ssize_t n = ::write(fd, data, size);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                write_errno = n < 0 ? errno : EIO;
                return false;
            }
            data += n;
            size -= static_cast<size_t>(n);
        }
        return true;
    }
};

[[noreturn]] void throw_write_error(const std::string& path, int error, uint64_t size) {
    std::string advice;
    if (error == ENOSPC || error == EDQUOT) {
        advice = "; the model needs " + std::to_string(size >> 20) +
                 " MiB: free some space or set HF_HUB_CACHE (or HF_HOME) to a larger disk";
    }
    throw Error(ErrorCode::output, "cannot write '" + path + "': " + std::strerror(error) + advice +
                                       " (the partial file stays and a later pull resumes it)");
}

}  // namespace

HubClient::HubClient(HubSettings settings) : settings_(std::move(settings)) {}

RepoListing HubClient::listing(const std::string& repo, const std::string& revision) const {
    const Url endpoint = split_url(settings_.endpoint);
    auto client = make_client(endpoint.origin);
    httplib::Headers headers = {{"User-Agent", "kvstash"}};
    if (!settings_.token.empty()) headers.emplace("Authorization", "Bearer " + settings_.token);
    std::string path =
        endpoint.path + "/api/models/" + encode_path(repo) + "/revision/" + encode_path(revision) + "?blobs=true";
    auto res = client->Get(path, headers);
    // A renamed repository answers with a redirect on the hub itself (relative): follow it, token included.
    for (int hop = 0; res && res->status >= 301 && res->status <= 308 && hop < kMaxRedirects; ++hop) {
        const std::string location = header(res->headers, "Location");
        if (!location.starts_with("/")) break;
        path = location;
        res = client->Get(path, headers);
    }
    if (!res) throw_unreachable(settings_.endpoint, res.error());
    if (res->status != 200) {
        throw_http_error(res->status, res->headers, res->body, repo, repo, !settings_.token.empty());
    }
    RepoListing out;
    try {
        const auto json = nlohmann::json::parse(res->body);
        out.commit = json.at("sha").get<std::string>();
        for (const auto& sibling : json.at("siblings")) {
            RepoFile f;
            f.path = sibling.at("rfilename").get<std::string>();
            if (sibling.contains("lfs") && sibling["lfs"].is_object()) {
                f.oid = sibling["lfs"].at("sha256").get<std::string>();
                f.size = sibling["lfs"].at("size").get<uint64_t>();
            } else {
                f.oid = sibling.at("blobId").get<std::string>();
                f.size = sibling.at("size").get<uint64_t>();
            }
            (void)digest_kind_of(f.oid);
            if (f.path.empty() || f.path.starts_with("/") || f.path.find("..") != std::string::npos) {
                throw Error(ErrorCode::bad_format, "the hub lists a file named '" + f.path + "'");
            }
            out.files.push_back(std::move(f));
        }
    } catch (const nlohmann::json::exception& e) {
        throw Error(ErrorCode::io, "the hub's description of " + repo + " is not what kvstash expects (" + e.what() +
                                       "); is HF_ENDPOINT (" + settings_.endpoint + ") a Hugging Face hub?");
    }
    if (digest_kind_of(out.commit) != DigestKind::git_blob_sha1) {
        throw Error(ErrorCode::io, "the hub gave '" + out.commit + "' as the commit of " + repo);
    }
    return out;
}

TransferResult HubClient::download(const std::string& repo, const std::string& commit, const RepoFile& file,
                                   const std::string& incomplete_path, const ProgressCallback& progress) const {
    FileSink sink;
    sink.path = incomplete_path;
    sink.fd = ::open(incomplete_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (sink.fd < 0) throw_write_error(incomplete_path, errno, file.size);
    const off_t existing = lseek(sink.fd, 0, SEEK_END);
    uint64_t offset = existing > 0 ? static_cast<uint64_t>(existing) : 0;
    if (offset > file.size) {  // not a prefix of this file: start over
        if (ftruncate(sink.fd, 0) != 0) throw_write_error(incomplete_path, errno, file.size);
        offset = 0;
    }
    if (offset == file.size && file.size > 0) return TransferResult::complete;

    const Url endpoint = split_url(settings_.endpoint);
    Url at{endpoint.origin,
           endpoint.path + "/" + encode_path(repo) + "/resolve/" + encode_path(commit) + "/" + encode_path(file.path)};
    const DownloadProgress start{file.path, offset, file.size, offset};
    if (progress) progress(start);
    for (int hop = 0; hop <= kMaxRedirects; ++hop) {
        auto client = make_client(at.origin);
        httplib::Headers headers = {{"User-Agent", "kvstash"}, {"Accept-Encoding", "identity"}};
        if (!settings_.token.empty() && at.origin == endpoint.origin) {
            headers.emplace("Authorization", "Bearer " + settings_.token);
        }
        if (offset > 0) headers.emplace("Range", "bytes=" + std::to_string(offset) + "-");
        int status = 0;
        httplib::Headers response_headers;
        std::string error_body;
        uint64_t done = offset;
        bool body_started = false;
        const auto res = client->Get(
            at.path, headers,
            [&](const httplib::Response& r) {
                status = r.status;
                response_headers = r.headers;
                if (status == 200 && done > 0) {  // the whole file, not the range: start over
                    if (ftruncate(sink.fd, 0) != 0) {
                        sink.write_errno = errno;
                        return false;
                    }
                    done = 0;
                }
                return true;
            },
            [&](const char* data, size_t size) {
                if (status != 200 && status != 206) {
                    if (error_body.size() < kMaxErrorBody) error_body.append(data, size);
                    return true;
                }
                body_started = true;
                if (done + size > file.size) {
                    sink.write_errno = EFBIG;  // more bytes than the hub listed: refuse them
                    return false;
                }
                if (!sink.write(data, size)) return false;
                done += size;
                if (progress) progress({file.path, done, file.size, start.resumed});
                return true;
            });
        if (sink.write_errno == EFBIG) {
            throw Error(ErrorCode::bad_format, file.path + " from " + repo + " is longer than the " +
                                                   std::to_string(file.size) + " bytes the hub listed; not kept");
        }
        if (sink.write_errno != 0) throw_write_error(incomplete_path, sink.write_errno, file.size);
        // An LFS file's resolve answer names its sha256 too: it must be the one the listing gave.
        if (const std::string linked = normalize_etag(header(response_headers, "X-Linked-Etag"));
            !linked.empty() && linked != file.oid) {
            throw Error(ErrorCode::bad_format, "the hub's X-Linked-Etag for " + file.path + " of " + repo + " is " +
                                                   linked + " but its file list says " + file.oid +
                                                   "; try again later");
        }
        if (status >= 300 && status < 400 && status != 304) {
            const std::string location = header(response_headers, "Location");
            if (location.empty()) throw Error(ErrorCode::io, "the hub redirected " + file.path + " nowhere");
            if (location.starts_with("http://") || location.starts_with("https://")) {
                at = split_url(location);
                if (at.path.empty()) at.path = "/";
            } else {
                at.path = location.starts_with("/") ? location : "/" + location;
            }
            continue;
        }
        if (status == 416 && offset > 0) {  // the range is past the end: the partial file is not this one
            if (ftruncate(sink.fd, 0) != 0) throw_write_error(incomplete_path, errno, file.size);
            return TransferResult::interrupted;
        }
        if (!res) {
            if (body_started || status == 200 || status == 206) return TransferResult::interrupted;
            throw_unreachable(at.origin, res.error());
        }
        if (status != 200 && status != 206) {
            throw_http_error(status, response_headers, error_body, file.path, repo, !settings_.token.empty());
        }
        return done == file.size ? TransferResult::complete : TransferResult::interrupted;
    }
    throw Error(ErrorCode::io,
                "the hub redirected " + file.path + " more than " + std::to_string(kMaxRedirects) + " times");
}

}  // namespace kvstash::hub
