#include "support/permission_checks.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace kvstash::test {
namespace {

struct Capabilities {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};  // pid 0: the calling thread
    __user_cap_data_struct data[2]{};
};

Capabilities current() {
    Capabilities caps;
    if (::syscall(SYS_capget, &caps.header, caps.data) != 0) {
        throw std::runtime_error(std::string("capget failed: ") + std::strerror(errno));
    }
    return caps;
}

void set(Capabilities& caps) {
    if (::syscall(SYS_capset, &caps.header, caps.data) != 0) {
        throw std::runtime_error(std::string("capset failed: ") + std::strerror(errno));
    }
}

}  // namespace

PermissionChecks::PermissionChecks() {
    Capabilities caps = current();
    saved_effective_[0] = caps.data[0].effective;
    saved_effective_[1] = caps.data[1].effective;
    // Both capabilities are below 32: word 0.
    caps.data[0].effective &= ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));
    set(caps);
}

PermissionChecks::~PermissionChecks() {
    try {
        Capabilities caps = current();
        caps.data[0].effective = saved_effective_[0];
        caps.data[1].effective = saved_effective_[1];
        set(caps);
    } catch (const std::exception&) {
        // Restoring can only fail if the process dropped them from its permitted set meanwhile.
    }
}

}  // namespace kvstash::test
