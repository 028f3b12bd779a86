// cpp-httplib's server with the connection limits it lacks (docs/architecture/server.md, "Connections and
// limits"): before a connection's request is handed to cpp-httplib, its whole head must arrive within
// a deadline (408) and fit a size (431; server/request_head.h); an address may hold a bounded number of
// connections (429); and when most connections are still waiting for their heads, new ones get a short
// head deadline, so that slowly-trickling clients cannot take the last threads.
//
// One request per connection (the server closes after each response), as HttpServer configures it.
#pragma once

#include <httplib.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "server/request_head.h"

namespace kvstash::server {

struct ConnectionLimits {
    RequestHeadLimits head;
    int max_connections = 1024;                           // --max-connections (the thread pool's size)
    int max_per_address = 0;                              // connections one client address may hold (0: no limit)
    std::chrono::milliseconds head_under_pressure{1000};  // the head deadline once 3/4 are waiting for heads
};

class GuardedServer : public httplib::Server {
public:
    explicit GuardedServer(ConnectionLimits limits) : limits_(limits) {}

private:
    bool process_and_close_socket(socket_t sock) override;
    // Counts `address` in; false when it already holds max_per_address connections.
    bool admit(const std::string& address);
    void release(const std::string& address);

    const ConnectionLimits limits_;
    std::atomic<int> waiting_for_head_{0};
    std::mutex mutex_;
    std::map<std::string, int> per_address_;
};

}  // namespace kvstash::server
