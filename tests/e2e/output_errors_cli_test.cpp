// Output errors have their own exit code (issue 19): a state that cannot be written, because the file
// system refuses it (/proc), the disk is "full" (a file size limit makes write() fail part-way), or the
// target is a special file (/dev/full, a FIFO), exits 5, not 3 ("bad input file"), says why, and leaves
// any previous file and no temporary file behind.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

class OutputErrorsCli : public ::testing::Test {
protected:
    fs::path dir;
    void SetUp() override {
        KVSTASH_REQUIRE_DEFAULT_MODEL();
        dir = fs::temp_directory_path() / ("kvstash_output_errors_" + std::to_string(getpid()));
        fs::create_directories(dir);
    }
    void TearDown() override {
        std::error_code ec;
        fs::permissions(dir, fs::perms::owner_all, ec);
        fs::remove_all(dir, ec);
    }
    static ProcessResult prefill_to(const std::string& target) {
        return run_cli({"prefill", "-t", "2", "-p", "Once upon a time", "-o", target});
    }
    size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir), {})); }
};

TEST_F(OutputErrorsCli, UnwritableTargetsExit5) {
    const ProcessResult proc = prefill_to("/proc/kvstash_output_errors.kvs");
    EXPECT_EQ(proc.exit_code, 5) << proc.err;
    EXPECT_NE(proc.err.find("cannot save state file '/proc/kvstash_output_errors.kvs'"), std::string::npos) << proc.err;

    // /dev/full: as root, rename() would replace the device node; it is refused as a special file.
    const ProcessResult full = prefill_to("/dev/full");
    EXPECT_EQ(full.exit_code, 5) << full.err;
    struct stat st {};
    ASSERT_EQ(::stat("/dev/full", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/full was replaced";

    const std::string fifo = (dir / "pipe.kvs").string();
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const ProcessResult to_fifo = prefill_to(fifo);
    EXPECT_EQ(to_fifo.exit_code, 5) << to_fifo.err;
    EXPECT_NE(to_fifo.err.find("it is a FIFO (named pipe), and only a regular file is replaced"), std::string::npos)
        << to_fifo.err;
    EXPECT_TRUE(fs::is_fifo(fifo));
    EXPECT_EQ(entries(), 1u);

    if (::geteuid() != 0) {  // root writes into read-only directories
        fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
        const ProcessResult read_only = prefill_to((dir / "s.kvs").string());
        EXPECT_EQ(read_only.exit_code, 5) << read_only.err;
        EXPECT_NE(read_only.err.find("Permission denied"), std::string::npos) << read_only.err;
        fs::permissions(dir, fs::perms::owner_all);
    }
}

// A write that fails part-way (what a full disk does), made with a file size limit: exit 5, the previous
// state file intact, no temporary file left.
TEST_F(OutputErrorsCli, AWriteFailingPartWayExits5AndKeepsThePreviousFile) {
    const std::string target = (dir / "s.kvs").string();
    std::ofstream(target) << "previous";
    // SIGXFSZ ignored (inherited through exec), so write() fails with EFBIG instead of killing us;
    // ulimit -f counts 512-byte blocks in dash: 8 KiB, far below a state file.
    const ProcessResult r = run_process(
        {"/bin/sh", "-c", "trap '' XFSZ; ulimit -f 16; exec \"$0\" prefill -t 2 -p 'Once upon a time' -o \"$1\"",
         cli_path(), target});
    EXPECT_EQ(r.exit_code, 5) << r.err;
    EXPECT_NE(r.err.find("cannot save state file '" + target + "'"), std::string::npos) << r.err;
    std::ifstream in(target);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "previous");
    EXPECT_EQ(entries(), 1u) << "a temporary file was left";
}

}  // namespace
}  // namespace kvstash::test
