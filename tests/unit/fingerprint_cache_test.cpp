// The on-disk fingerprint cache: hits only for the same file identity, ignores damaged lines, stays
// bounded, and can be switched off.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "state/fingerprint_cache.h"

namespace kvstash {
namespace {

namespace fs = std::filesystem;

class FingerprintCache : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_fpcache_" + std::to_string(getpid()));
        fs::remove_all(dir_);
        setenv("KVSTASH_CACHE_DIR", dir_.c_str(), 1);
    }
    void TearDown() override {
        unsetenv("KVSTASH_CACHE_DIR");
        fs::remove_all(dir_);
    }
    fs::path dir_;
};

const std::string hex_a = "0123456789abcdef0123456789abcdef";
const std::string hex_b = "fedcba9876543210fedcba9876543210";

TEST_F(FingerprintCache, HitsOnlyTheSameIdentity) {
    const FileIdentity id{1, 2, 3, 4};
    EXPECT_FALSE(fingerprint_cache_lookup(id));
    fingerprint_cache_store(id, hex_a);
    EXPECT_EQ(fingerprint_cache_lookup(id), hex_a);
    EXPECT_FALSE(fingerprint_cache_lookup(FileIdentity{1, 2, 3, 5})) << "a new mtime must miss";
    EXPECT_FALSE(fingerprint_cache_lookup(FileIdentity{1, 9, 3, 4})) << "a new inode must miss";
    fingerprint_cache_store(id, hex_b);
    EXPECT_EQ(fingerprint_cache_lookup(id), hex_b) << "the newest entry wins";
}

TEST_F(FingerprintCache, DamagedLinesAreIgnored) {
    const FileIdentity id{7, 8, 9, 10};
    fs::create_directories(dir_);
    std::ofstream(dir_ / "fingerprints") << "7 8 9 10 not-hex-at-all-not-hex-at-all!!\n7 8 9 10 0123\ngarbage\n";
    EXPECT_FALSE(fingerprint_cache_lookup(id));
    fingerprint_cache_store(id, "NOT HEX");
    EXPECT_FALSE(fingerprint_cache_lookup(id));
}

TEST_F(FingerprintCache, StaysBounded) {
    for (uint64_t i = 0; i < 3000; ++i) fingerprint_cache_store(FileIdentity{i, i, i, static_cast<int64_t>(i)}, hex_a);
    EXPECT_LE(fs::file_size(dir_ / "fingerprints"), 80u * 1024u);
    EXPECT_EQ(fingerprint_cache_lookup(FileIdentity{2999, 2999, 2999, 2999}), hex_a);
}

TEST_F(FingerprintCache, EmptyDirectorySettingDisablesIt) {
    setenv("KVSTASH_CACHE_DIR", "", 1);
    fingerprint_cache_store(FileIdentity{1, 1, 1, 1}, hex_a);
    EXPECT_FALSE(fingerprint_cache_lookup(FileIdentity{1, 1, 1, 1}));
}

}  // namespace
}  // namespace kvstash
