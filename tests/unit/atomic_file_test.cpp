// base/atomic_file: a file replaced whole or not at all, and no temporary file left behind either way.
#include "base/atomic_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "base/temp_file_name.h"
#include "kvstash/error.h"
#include "support/permission_checks.h"

namespace kvstash {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public ::testing::Test {
protected:
    fs::path dir;
    void SetUp() override {
        dir = fs::temp_directory_path() / ("kvstash_atomic_file_" + std::to_string(::getpid()) + "_" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    void TearDown() override {
        std::error_code ec;
        fs::permissions(dir, fs::perms::owner_all, ec);
        fs::remove_all(dir, ec);
    }
    std::string path(const char* name) const { return (dir / name).string(); }
    static std::string read(const std::string& p) {
        std::ifstream in(p, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
    }
    size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir), {})); }
    void write_text(const std::string& p, const std::string& text, atomic_file::Durability d) const {
        atomic_file::write(
            p, [&](int fd, const std::string& temp) { atomic_file::write_all(fd, text.data(), text.size(), temp); },
            {d, "test file"});
    }
};

TEST_F(AtomicFile, WritesAndReplaces) {
    for (auto durability : {atomic_file::Durability::none, atomic_file::Durability::file_and_directory}) {
        const std::string p = path("a.bin");
        write_text(p, "first", durability);
        EXPECT_EQ(read(p), "first");
        write_text(p, "second, longer", durability);
        EXPECT_EQ(read(p), "second, longer");
        EXPECT_EQ(entries(), 1u) << "temp file left";
    }
}

TEST_F(AtomicFile, TempFilesAreUniqueHiddenAndBesideTheTarget) {
    const std::string a = atomic_file::temp_path_for(path("x.kvs"));
    const std::string b = atomic_file::temp_path_for(path("x.kvs"));
    EXPECT_NE(a, b);
    EXPECT_EQ(fs::path(a).parent_path(), dir);
    EXPECT_TRUE(fs::path(a).filename().string().starts_with(atomic_file::kTempPrefix)) << a;
    EXPECT_EQ(atomic_file::temp_path_for("x").substr(0, atomic_file::kTempPrefix.size()), atomic_file::kTempPrefix);
}

TEST_F(AtomicFile, TempNamesCarryTargetPidAndAreUniquePerWriteAcrossThreads) {
    const std::string a = atomic_file::temp_path_for(path("my-state.v2.kvs"));
    const auto parsed = temp_file_name::parse(fs::path(a).filename().string());
    ASSERT_TRUE(parsed) << a;
    EXPECT_EQ(parsed->target, "my-state.v2.kvs");
    EXPECT_EQ(parsed->pid, ::getpid());
    for (const char* not_ours : {"", "x.kvs", ".tmp-", ".tmp-a-1-0", ".tmp-a-1-0-0000000g", ".tmp--1-0-00000000",
                                 ".tmp-a-0-0-00000000", ".tmp-a-x-0-00000000"})
        EXPECT_FALSE(temp_file_name::parse(not_ours)) << not_ours;
    // Threads share the pid: the names must still differ.
    std::vector<std::string> names(4 * 500);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 500; ++i) names[static_cast<size_t>(t * 500 + i)] = atomic_file::temp_path_for("x");
        });
    for (auto& thread : threads) thread.join();
    std::sort(names.begin(), names.end());
    EXPECT_EQ(std::unique(names.begin(), names.end()), names.end());
}

// A writer SIGKILLed mid-write leaves its temporary file; the next write to that target removes it, and a
// live writer's temporary file (ours) is never touched.
TEST_F(AtomicFile, KilledWritersDebrisGoesWithTheNextWriteToTheTarget) {
    const std::string p = path("state.kvs");
    const pid_t child = ::fork();
    if (child == 0) {
        try {
            atomic_file::write(p, [](int fd, const std::string& temp) {
                atomic_file::write_all(fd, std::string(1 << 20, 'x').data(), 1 << 20, temp);
                ::kill(::getpid(), SIGKILL);
                ::pause();
            });
        } catch (...) {}
        ::_exit(1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    ASSERT_EQ(entries(), 1u) << "the killed writer left no temporary file";
    const std::string debris = fs::directory_iterator(dir)->path().filename().string();
    EXPECT_TRUE(temp_file_name::is_abandoned(debris, std::chrono::seconds(0))) << debris;
    const std::string live = fs::path(atomic_file::temp_path_for(p)).filename().string();
    std::ofstream(dir / live) << "in progress";
    const std::string other_target = ".tmp-other.kvs-" + std::to_string(child) + "-0-00000000";
    std::ofstream(dir / other_target) << "another target's debris";
    write_text(p, "new", atomic_file::Durability::none);
    EXPECT_EQ(read(p), "new");
    EXPECT_FALSE(fs::exists(dir / debris));
    EXPECT_TRUE(fs::exists(dir / live)) << "a live writer's temporary file was removed";
    EXPECT_TRUE(fs::exists(dir / other_target)) << "only the target's own debris goes per write";
    // A directory scan (server / cache start-up) takes every dead writer's file, still not the live one.
    EXPECT_EQ(temp_file_name::remove_abandoned(dir.string()), 1u);
    EXPECT_FALSE(fs::exists(dir / other_target));
    EXPECT_TRUE(fs::exists(dir / live));
    // A name we cannot read a pid from goes only once old.
    EXPECT_FALSE(temp_file_name::is_abandoned(".tmp-state.kvs-12-3", std::chrono::minutes(5)));
    EXPECT_TRUE(temp_file_name::is_abandoned(".tmp-state.kvs-12-3", std::chrono::hours(2)));
    EXPECT_FALSE(temp_file_name::is_abandoned("state.kvs", std::chrono::hours(2)));
}

// The content writer fails half way: its exception comes through, the old file is intact, no temp file.
TEST_F(AtomicFile, FailureMidWriteKeepsTheOldFileAndRemovesTheTemp) {
    const std::string p = path("state.kvs");
    write_text(p, "old content", atomic_file::Durability::file_and_directory);
    std::string seen_temp;
    EXPECT_THROW(atomic_file::write(p,
                                    [&](int fd, const std::string& temp) {
                                        seen_temp = temp;
                                        atomic_file::write_all(fd, "partial", 7, temp);
                                        throw Error(ErrorCode::bad_format, "stop");
                                    }),
                 Error);
    EXPECT_FALSE(seen_temp.empty());
    EXPECT_FALSE(fs::exists(seen_temp));
    EXPECT_EQ(read(p), "old content");
    EXPECT_EQ(entries(), 1u);
    // A write error (a closed descriptor) is an Error(io) naming the temp file.
    try {
        atomic_file::write(p, [&](int, const std::string& temp) {
            // A descriptor not open for writing: write(2) fails with EBADF.
            struct ReadOnly {
                int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                ~ReadOnly() { ::close(fd); }
            } read_only;
            atomic_file::write_all(read_only.fd, "x", 1, temp);
        });
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::output);
        EXPECT_NE(std::string(e.what()).find(".tmp-state.kvs-"), std::string::npos) << e.what();
    }
    EXPECT_EQ(read(p), "old content");
    EXPECT_EQ(entries(), 1u);
}

// As root too (CI): PermissionChecks drops the capabilities that let root write into a read-only directory.
TEST_F(AtomicFile, UnwritableDirectoryIsAnOutputErrorNamingThePath) {
    const std::string p = path("f.txt");
    write_text(p, "kept", atomic_file::Durability::none);
    const test::PermissionChecks checks;
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
    try {
        write_text(p, "new", atomic_file::Durability::file_and_directory);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::output);
        const std::string message = e.what();
        EXPECT_NE(message.find("cannot save test file '" + p + "'"), std::string::npos) << message;
        EXPECT_NE(message.find("Permission denied"), std::string::npos) << message;
    }
    EXPECT_FALSE(atomic_file::try_write(p, {"new"}));
    fs::permissions(dir, fs::perms::owner_all);
    EXPECT_EQ(read(p), "kept");
    EXPECT_EQ(entries(), 1u);
}

// /proc refuses new files even to root.
TEST_F(AtomicFile, ADirectoryNobodyCanWriteIsAnOutputError) {
    const std::string p = "/proc/kvstash_atomic_file_test.bin";
    try {
        write_text(p, "x", atomic_file::Durability::file_and_directory);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::output);
        EXPECT_NE(std::string(e.what()).find("cannot save test file '" + p + "': creating '/proc/.tmp-"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(atomic_file::try_write(p, {"x"}));
}

TEST_F(AtomicFile, MissingDirectoryIsAnOutputError) {
    const std::string p = path("no/such/dir/f.txt");
    EXPECT_THROW(write_text(p, "x", atomic_file::Durability::none), Error);
    EXPECT_FALSE(atomic_file::try_write(p, {"x"}));
}

TEST_F(AtomicFile, TryWriteConcatenatesItsParts) {
    const std::string p = path("parts.bin");
    ASSERT_TRUE(atomic_file::try_write(p, {"ab", "", std::string_view("c\0d", 3)}));
    EXPECT_EQ(read(p), std::string("abc\0d", 5));
    EXPECT_EQ(entries(), 1u);
}

}  // namespace
}  // namespace kvstash
