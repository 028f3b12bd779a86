#include "support/every_path.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "backends/cpu/runtime/numerics.h"

namespace kvstash::test {
namespace {
// A cross build's tests run under an emulator (CMAKE_CROSSCOMPILING_EMULATOR, e.g. qemu-aarch64: tests/CMakeLists.txt),
// and so must the children: the kernel cannot start this executable by itself.
#ifdef KVSTASH_TEST_EMULATOR
const std::string kEmulator = std::string(KVSTASH_TEST_EMULATOR) + " ";
#else
const std::string kEmulator;
#endif
}  // namespace

bool forced_isa() {
    const char* forced = std::getenv("KVSTASH_ISA");
    return forced != nullptr && *forced != '\0';
}

std::string self_command() {
    // "/proc/self/exe" would name the shell inside system(), so resolve our own path here.
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) throw std::runtime_error("cannot read /proc/self/exe");
    self[len] = '\0';
    return kEmulator + "'" + std::string(self) + "'";
}

int run_child(const std::string& command) {
    char path[] = "/tmp/kvstash_child_XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) throw std::runtime_error("cannot create a temporary file for a child's output");
    close(fd);
    const int status = std::system((command + " >'" + path + "' 2>&1").c_str());
    std::ifstream in(path);
    std::stringstream output;
    output << in.rdbuf();
    std::remove(path);
    if (status == 0) {
        std::cout << "child passed: " << command << "\n";
        return 0;
    }
    // A child's own skipped tests must not reach ctest's output: gtest_discover_tests marks a test whose output
    // says "[  SKIPPED ]" as skipped whatever its exit code, which would hide this failure.
    std::string text = output.str();
    for (std::string::size_type at = 0; (at = text.find("[  SKIPPED ]", at)) != std::string::npos;) {
        text.replace(at, 12, "[  skipped ]");
    }
    std::cout << "child failed (status " << status << "): " << command << "\n" << text << "\n";
    return status;
}

bool passes_on_path(const std::string& setting, const std::string& gtest_filter) {
    const std::string run = "KVSTASH_ISA=" + setting + " " + self_command() + " --gtest_filter='" + gtest_filter + "'";
    return run_child(run) == 0;
}

std::vector<std::string> failing_paths(const std::string& gtest_filter) {
    std::vector<std::string> failed;
    for (const std::string& setting : isa_settings()) {
        if (!passes_on_path(setting, gtest_filter)) failed.push_back(setting);
    }
    return failed;
}

}  // namespace kvstash::test
