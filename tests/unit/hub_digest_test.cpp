// The digests that verify downloads (src/hub/digest.h) against independent values: SHA-256 of "abc" from
// FIPS 180-2's example, Git's blob SHA-1 of "hello\n" as `git hash-object` prints it; and a file's digest
// fed in pieces equals the whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hub/digest.h"
#include "kvstash/error.h"

namespace kvstash::hub {
namespace {

TEST(HubDigest, KnownValues) {
    Digest sha256(DigestKind::sha256, 3);
    sha256.update("abc", 3);
    EXPECT_EQ(sha256.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    Digest git(DigestKind::git_blob_sha1, 6);
    git.update("hel", 3);
    git.update("lo\n", 3);
    EXPECT_EQ(git.hex(), "ce013625030ba8dba906f756967f9e9ca394464a");  // printf 'hello\n' | git hash-object --stdin
}

TEST(HubDigest, FileDigestAndOidKinds) {
    const auto path = std::filesystem::temp_directory_path() / ("kvstash-digest-" + std::to_string(getpid()));
    std::string content(3 << 20, 'x');  // more than one read buffer
    content += "tail";
    std::ofstream(path, std::ios::binary) << content;
    Digest whole(DigestKind::sha256, content.size());
    whole.update(content.data(), content.size());
    EXPECT_EQ(digest_file(path.string(), DigestKind::sha256, content.size()), whole.hex());
    std::filesystem::remove(path);
    EXPECT_EQ(digest_kind_of(std::string(64, 'a')), DigestKind::sha256);
    EXPECT_EQ(digest_kind_of(std::string(40, '0')), DigestKind::git_blob_sha1);
    for (const std::string& bad : std::vector<std::string>{"", "xyz", std::string(63, 'a'), std::string(64, 'g')}) {
        EXPECT_THROW(digest_kind_of(bad), Error) << bad;
    }
}

}  // namespace
}  // namespace kvstash::hub
