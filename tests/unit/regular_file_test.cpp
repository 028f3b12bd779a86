// base/regular_file: special files are refused at once (a FIFO would block open() forever), regular files
// are read whole. The FIFO cases would hang, not fail, if the check came after a blocking open: ctest's
// timeout catches that.
#include "base/regular_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kvstash/error.h"

namespace kvstash {
namespace {

namespace fs = std::filesystem;

class RegularFile : public ::testing::Test {
protected:
    fs::path dir;
    void SetUp() override {
        dir = fs::temp_directory_path() / ("kvstash_regular_file_" + std::to_string(::getpid()));
        fs::create_directories(dir);
    }
    void TearDown() override { fs::remove_all(dir); }
};

void expect_refused(const std::string& path, const std::string& kind) {
    try {
        regular_file::read_all(path, "test input");
        FAIL() << path << " was read";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::io);
        EXPECT_NE(
            std::string(e.what()).find("cannot open test input '" + path + "': it is " + kind + ", not a regular file"),
            std::string::npos)
            << e.what();
    }
}

TEST_F(RegularFile, SpecialFilesAreRefusedWithoutBlocking) {
    const std::string fifo = (dir / "pipe").string();
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    expect_refused(fifo, "a FIFO (named pipe)");
    expect_refused(dir.string(), "a directory");
    expect_refused("/dev/null", "a character device");
    EXPECT_THROW(regular_file::open_for_reading((dir / "missing").string()), Error);
}

TEST_F(RegularFile, ReadsARegularFileWhole) {
    const std::string path = (dir / "text").string();
    const std::string content = std::string(100000, 'a') + "end";
    std::ofstream(path, std::ios::binary) << content;
    EXPECT_EQ(regular_file::read_all(path), content);
    // The descriptor is blocking again after the check (reads of a regular file ignore O_NONBLOCK, but a
    // caller may hand it on).
    const int fd = regular_file::open_for_reading(path);
    EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    ::close(fd);
}

}  // namespace
}  // namespace kvstash
