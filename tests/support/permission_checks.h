// File permission checks for this thread even as root (CI runs the tests as root): root passes them
// through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, and this drops both from the calling thread's
// effective capabilities for the object's lifetime (they stay permitted, so the destructor raises them
// again). A test of "directory not writable" then sees EACCES as an ordinary user does.
//
//   test::PermissionChecks checks;   // throws std::runtime_error where capset(2) refuses
//   fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);  // now refuses root's writes
#pragma once

#include <cstdint>

namespace kvstash::test {

class PermissionChecks {
public:
    PermissionChecks();
    ~PermissionChecks();
    PermissionChecks(const PermissionChecks&) = delete;
    PermissionChecks& operator=(const PermissionChecks&) = delete;

private:
    uint32_t saved_effective_[2] = {0, 0};  // the two 32-bit words of the effective set (capability v3)
};

}  // namespace kvstash::test
