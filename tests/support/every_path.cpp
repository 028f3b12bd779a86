#include "support/every_path.h"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include "backends/cpu/runtime/numerics.h"

namespace kvstash::test {

bool forced_isa() {
    const char* forced = std::getenv("KVSTASH_ISA");
    return forced != nullptr && *forced != '\0';
}

std::vector<std::string> failing_paths(const std::string& gtest_filter) {
    // "/proc/self/exe" would name the shell inside system(), so resolve our own path here.
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) throw std::runtime_error("cannot read /proc/self/exe");
    self[len] = '\0';
    std::vector<std::string> failed;
    for (const std::string& setting : isa_settings()) {
        const std::string run =
            "KVSTASH_ISA=" + setting + " '" + std::string(self) + "' --gtest_filter='" + gtest_filter + "'";
        if (std::system(run.c_str()) != 0) failed.push_back(setting);
    }
    return failed;
}

}  // namespace kvstash::test
