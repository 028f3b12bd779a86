// Streaming content digests for verifying downloads against a hub's metadata: SHA-256 (the oid of a Git
// LFS file, sent as X-Linked-Etag) and Git's blob SHA-1 (the oid of a small file kept in Git itself, sent
// as ETag: sha1("blob <size>\0" + content)). OpenSSL's libcrypto computes both (see docs/architecture/hub.md,
// "Dependencies": it is already loaded with cpp-httplib's TLS).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kvstash::hub {

enum class DigestKind { sha256, git_blob_sha1 };

class Digest {
public:
    // git_blob_sha1 needs the content's size up front (it is hashed first, as Git does).
    Digest(DigestKind kind, uint64_t content_size);
    ~Digest();
    Digest(const Digest&) = delete;
    Digest& operator=(const Digest&) = delete;

    void update(const void* data, size_t size);
    // Lowercase hex of the digest; the object cannot be updated afterwards.
    std::string hex();

private:
    struct Context;
    std::unique_ptr<Context> context_;
};

// The kind of digest an oid names: 64 hex digits -> sha256, 40 -> git_blob_sha1; throws Error(bad_format)
// for anything else (a hub answer kvstash cannot verify a file with).
DigestKind digest_kind_of(std::string_view oid);

// Digest of the first `size` bytes of the file at `path` (Error(io) when it cannot be read).
std::string digest_file(const std::string& path, DigestKind kind, uint64_t size);

}  // namespace kvstash::hub
