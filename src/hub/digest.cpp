#include "hub/digest.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <cctype>
#include <vector>

#include "base/regular_file.h"
#include "kvstash/error.h"

namespace kvstash::hub {

struct Digest::Context {
    EVP_MD_CTX* md = nullptr;
    ~Context() { EVP_MD_CTX_free(md); }
};

Digest::Digest(DigestKind kind, uint64_t content_size) : context_(std::make_unique<Context>()) {
    context_->md = EVP_MD_CTX_new();
    const EVP_MD* md = kind == DigestKind::sha256 ? EVP_sha256() : EVP_sha1();
    if (!context_->md || EVP_DigestInit_ex(context_->md, md, nullptr) != 1) {
        throw Error(ErrorCode::internal, "OpenSSL could not start a digest");
    }
    if (kind == DigestKind::git_blob_sha1) {
        const std::string header = "blob " + std::to_string(content_size);
        update(header.data(), header.size() + 1);  // with its terminating NUL, as Git hashes it
    }
}

Digest::~Digest() = default;

void Digest::update(const void* data, size_t size) {
    if (EVP_DigestUpdate(context_->md, data, size) != 1) throw Error(ErrorCode::internal, "OpenSSL digest failed");
}

std::string Digest::hex() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(context_->md, out, &n) != 1) throw Error(ErrorCode::internal, "OpenSSL digest failed");
    static constexpr char digits[] = "0123456789abcdef";
    std::string text;
    for (unsigned int i = 0; i < n; ++i) {
        text += digits[out[i] >> 4];
        text += digits[out[i] & 15];
    }
    return text;
}

DigestKind digest_kind_of(std::string_view oid) {
    bool hex = !oid.empty();
    for (const char c : oid) hex = hex && std::isxdigit(static_cast<unsigned char>(c));
    if (hex && oid.size() == 64) return DigestKind::sha256;
    if (hex && oid.size() == 40) return DigestKind::git_blob_sha1;
    throw Error(ErrorCode::bad_format, "the hub gave '" + std::string(oid.substr(0, 80)) +
                                           "' as a file's checksum, which is neither a SHA-256 nor a Git SHA-1; "
                                           "kvstash cannot verify the file (is HF_ENDPOINT a Hugging Face hub?)");
}

std::string digest_file(const std::string& path, DigestKind kind, uint64_t size) {
    const int fd = regular_file::open_for_reading(path, "downloaded file");
    Digest digest(kind, size);
    std::vector<char> buffer(1 << 20);
    uint64_t left = size;
    while (left > 0) {
        const ssize_t n = read(fd, buffer.data(), std::min<uint64_t>(buffer.size(), left));
        if (n <= 0) {
            close(fd);
            throw Error(ErrorCode::io, "cannot read back the downloaded file '" + path + "'");
        }
        digest.update(buffer.data(), static_cast<size_t>(n));
        left -= static_cast<uint64_t>(n);
    }
    close(fd);
    return digest.hex();
}

}  // namespace kvstash::hub
