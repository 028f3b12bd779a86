// Runs some of this test executable's tests again on every numerics path this CPU runs
// (backends/cpu/runtime/numerics.h isa_settings: scalar, avx2, avx512, avx512-novnni where available), each in a child
// process with KVSTASH_ISA set: the variable is read once per process.
#pragma once

#include <string>
#include <vector>

namespace kvstash::test {

// Whether this process is such a child (KVSTASH_ISA is set): the every-path test then has nothing to add.
bool forced_isa();

// Runs `gtest_filter` in one child per path; returns the KVSTASH_ISA values whose child failed.
std::vector<std::string> failing_paths(const std::string& gtest_filter);
// The shell command that starts this test executable again (its path, quoted; under the emulator in a cross build).
std::string self_command();
// Runs a shell command (a child of this test executable), its output kept aside: printed only when it fails, with the
// child's "[  SKIPPED ]" lines renamed so that ctest does not take the parent test for a skipped one. Returns
// std::system's status (0: passed).
int run_child(const std::string& command);
// Runs `gtest_filter` in one child with KVSTASH_ISA=setting; whether it passed.
bool passes_on_path(const std::string& setting, const std::string& gtest_filter);

}  // namespace kvstash::test
