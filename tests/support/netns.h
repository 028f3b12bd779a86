// A network namespace joined to this host by a veth pair on a private /30, for end-to-end tests that run
// servers as separate hosts: 10.231.P.(4i+1) on the host side, 10.231.P.(4i+2) inside (P from this
// process's pid, i the caller's index 0..63). Needs root and `ip` (iproute2); create() returns nullptr
// where either is missing or the kernel refuses, so the test falls back to loopback ports.
//
//   std::unique_ptr<NetnsHost> ns = NetnsHost::create(0);
//   ServerPlace at{ns->inner_address(), ns->launcher()};   // `ip netns exec NS ...`
//
// Destroyed: `ip netns del` (the veth pair goes with it). Stop the processes inside first: a namespace
// lives on while a process is in it. create() also deletes namespaces left by dead test processes.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace kvstash::test {

class NetnsHost {
public:
    // nullptr when not root, KVSTASH_TEST_NO_NETNS is set, or any `ip` step fails (undone).
    static std::unique_ptr<NetnsHost> create(int index);
    ~NetnsHost();
    NetnsHost(const NetnsHost&) = delete;
    NetnsHost& operator=(const NetnsHost&) = delete;

    const std::string& name() const { return name_; }
    const std::string& host_address() const { return host_address_; }    // this host's end of the veth
    const std::string& inner_address() const { return inner_address_; }  // the namespace's end
    std::vector<std::string> launcher() const;                           // {ip, netns, exec, NAME}

private:
    NetnsHost() = default;
    std::string name_, host_link_, host_address_, inner_address_;
};

}  // namespace kvstash::test
