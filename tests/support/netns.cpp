#include "support/netns.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "support/subprocess.h"

namespace kvstash::test {
namespace {

constexpr const char* kIp = "/usr/sbin/ip";
constexpr const char* kPrefix = "kvstash";  // namespaces are kvstash<pid>_<index>

bool ip(std::vector<std::string> args) {
    args.insert(args.begin(), kIp);
    return run_process(args).exit_code == 0;
}

// Namespaces named kvstash<pid>_<index> whose pid is gone (a test killed before its destructors ran), and
// the servers it left running in them (they would keep the namespace alive).
void delete_stale_namespaces() {
    std::istringstream list(run_process({kIp, "netns", "list"}).out);
    for (std::string line; std::getline(list, line);) {
        const std::string name = line.substr(0, line.find(' '));
        if (name.rfind(kPrefix, 0) != 0 || name.find('_') == std::string::npos) continue;
        const long pid = std::atol(name.c_str() + std::char_traits<char>::length(kPrefix));
        if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
        std::istringstream inside(run_process({kIp, "netns", "pids", name}).out);
        for (long orphan = 0; inside >> orphan;) ::kill(static_cast<pid_t>(orphan), SIGKILL);
        ip({"netns", "del", name});
    }
}

}  // namespace

std::unique_ptr<NetnsHost> NetnsHost::create(int index) {
    if (::geteuid() != 0 || std::getenv("KVSTASH_TEST_NO_NETNS") != nullptr || ::access(kIp, X_OK) != 0) return nullptr;
    delete_stale_namespaces();
    const std::string pid = std::to_string(::getpid());
    const std::string subnet = "10.231." + std::to_string(::getpid() % 256) + ".";
    std::unique_ptr<NetnsHost> ns(new NetnsHost());
    ns->name_ = kPrefix + pid + "_" + std::to_string(index);
    ns->host_link_ = "kvh" + pid + "_" + std::to_string(index);  // <= 15 chars: pid has at most 7 digits
    const std::string inner_link = "kvn" + pid + "_" + std::to_string(index);
    ns->host_address_ = subnet + std::to_string(4 * index + 1);
    ns->inner_address_ = subnet + std::to_string(4 * index + 2);
    if (!ip({"netns", "add", ns->name_})) return nullptr;  // nothing made: the destructor would delete another's
    const bool ok =
        ip({"link", "add", ns->host_link_, "type", "veth", "peer", "name", inner_link, "netns", ns->name_}) &&
        ip({"addr", "add", ns->host_address_ + "/30", "dev", ns->host_link_}) &&
        ip({"link", "set", ns->host_link_, "up"}) &&
        ip({"-n", ns->name_, "addr", "add", ns->inner_address_ + "/30", "dev", inner_link}) &&
        ip({"-n", ns->name_, "link", "set", inner_link, "up"}) && ip({"-n", ns->name_, "link", "set", "lo", "up"});
    if (!ok) return nullptr;  // the destructor undoes what was made
    return ns;
}

NetnsHost::~NetnsHost() {
    ip({"netns", "del", name_});
    ip({"link", "del", host_link_});  // normally gone with its peer; left if the peer never moved in
}

std::vector<std::string> NetnsHost::launcher() const { return {kIp, "netns", "exec", name_}; }

}  // namespace kvstash::test
