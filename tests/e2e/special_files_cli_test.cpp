// Special files given where the CLI reads a file (issue 19): a FIFO as the model, a state, a saved chat
// session or a text file, and a device as the model, are refused at once with a message that names the
// kind of file and exit code 3 (bad input file). Each run is under `timeout`: before the fix a FIFO
// blocked open() forever, which shows here as exit 124.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

TEST(SpecialFilesCli, FifoAndDevicesAreRefusedPromptly) {
    const fs::path dir = fs::temp_directory_path() / ("kvstash_special_files_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const std::string fifo = (dir / "pipe").string();
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::vector<std::vector<std::string>> cases = {
        {"state", "info", fifo},
        {"generate", "--state", fifo, "-p", "x", "-n", "1"},
        {"generate", "-m", fifo, "-p", "x", "-n", "1"},
        {"tokenize", "-f", fifo},
        {"chat", "--load", fifo},
        {"generate", "-m", "/dev/zero", "-p", "x", "-n", "1"},
    };
    for (const auto& args : cases) {
        std::vector<std::string> argv{"/usr/bin/timeout", "10", cli_path()};
        argv.insert(argv.end(), args.begin(), args.end());
        std::string where;
        for (const auto& a : args) where += a + " ";
        const auto start = std::chrono::steady_clock::now();
        const ProcessResult r = run_process(argv);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_EQ(r.exit_code, 3) << where << r.err;
        EXPECT_LT(seconds, 9.0) << where;
        const bool named = r.err.find("it is a FIFO (named pipe), not a regular file") != std::string::npos ||
                           r.err.find("it is a character device, not a regular file") != std::string::npos;
        EXPECT_TRUE(named) << where << r.err;
    }
    fs::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::test
