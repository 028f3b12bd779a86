// One mutex per state name, for the operations that read-modify-write a name (create, upload, delete):
// two requests for one name run one after the other, requests for different names do not wait for each
// other. A name's mutex exists only while someone holds or waits for it, so many names cost nothing.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kvstash::server {

class StateNameLocks {
    struct Slot {
        std::mutex mutex;
        int users = 0;  // holders + waiters; guarded by StateNameLocks::mutex_
    };

public:
    // Holds a name's mutex from construction to destruction.
    class Guard {
    public:
        Guard(StateNameLocks& locks, const std::string& name);
        ~Guard();
        Guard(const Guard&) = delete;
        Guard& operator=(const Guard&) = delete;

    private:
        StateNameLocks& locks_;
        std::map<std::string, std::unique_ptr<Slot>>::iterator slot_;
    };

    Guard lock(const std::string& name) { return Guard(*this, name); }

private:
    std::mutex mutex_;
    std::map<std::string, std::unique_ptr<Slot>> slots_;
};

}  // namespace kvstash::server
