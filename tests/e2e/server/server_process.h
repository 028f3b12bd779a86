// Starts the real `kvstash serve` on a free loopback port for the server's end-to-end tests, and stops
// it (SIGTERM, then waits) when destroyed. Header-only: shared by tests/e2e/server_*_test.cpp.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "support/paths.h"

extern char** environ;

namespace kvstash::test {

// Where a server runs: the address it listens on, and a launcher put before its command line that execs
// it (e.g. {"/usr/sbin/ip", "netns", "exec", NS}: the pid stays the server's).
struct ServerPlace {
    std::string host = "127.0.0.1";
    std::vector<std::string> launcher;
};

class ServerProcess {
public:
    // `args` after `kvstash serve --host HOST --port 0`. Throws std::runtime_error (with what the
    // server printed) when it does not come up within a minute. A non-empty `stderr_path` receives the
    // server's stderr (its request log), else it goes to the test's.
    explicit ServerProcess(const std::vector<std::string>& args, const std::string& stderr_path = {},
                           const ServerPlace& place = {})
        : host_(place.host) {
        std::signal(SIGPIPE, SIG_IGN);
        std::vector<std::string> argv = place.launcher;
        argv.insert(argv.end(), {cli_path(), "serve", "--host", host_, "--port", "0"});
        argv.insert(argv.end(), args.begin(), args.end());
        int out[2];
        if (pipe(out)) throw std::runtime_error("pipe failed");
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, out[1], 1);
        if (!stderr_path.empty()) {
            posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        }
        posix_spawn_file_actions_addclose(&actions, out[0]);
        posix_spawn_file_actions_addclose(&actions, out[1]);
        std::vector<char*> c_args;
        for (auto& a : argv) c_args.push_back(a.data());
        c_args.push_back(nullptr);
        const int rc = posix_spawn(&pid_, c_args[0], &actions, nullptr, c_args.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        close(out[1]);
        if (rc != 0) {
            close(out[0]);
            throw std::runtime_error("cannot start " + argv[0]);
        }
        // The first stdout line: "kvstash serve: listening on http://127.0.0.1:PORT (model ...)".
        std::string printed;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (printed.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
            pollfd fd{out[0], POLLIN, 0};
            if (poll(&fd, 1, 200) <= 0) continue;
            char buffer[512];
            const ssize_t n = read(out[0], buffer, sizeof buffer);
            if (n <= 0) break;
            printed.append(buffer, static_cast<size_t>(n));
        }
        close(out[0]);
        const std::string listening = "http://" + host_ + ":";
        const auto at = printed.find(listening);
        if (at == std::string::npos) {
            stop();
            throw std::runtime_error("kvstash serve did not start; it printed: " + printed);
        }
        port_ = std::stoi(printed.substr(at + listening.size()));
        httplib::Client client(host_, port_);
        for (int i = 0; i < 300; ++i) {
            if (auto res = client.Get("/health"); res && res->status == 200) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        stop();
        throw std::runtime_error("kvstash serve never answered /health");
    }
    ~ServerProcess() { stop(); }
    ServerProcess(const ServerProcess&) = delete;
    ServerProcess& operator=(const ServerProcess&) = delete;

    int port() const { return port_; }
    pid_t pid() const { return pid_; }  // the server's process (its /proc/PID/status, maps)
    const std::string& host() const { return host_; }
    std::string url() const { return "http://" + host_ + ":" + std::to_string(port_); }
    httplib::Client client() const {
        httplib::Client c(host_, port_);
        c.set_read_timeout(120, 0);
        return c;
    }

    // SIGTERM and wait; returns the exit status (-1 when killed by a signal or already stopped).
    int stop() {
        if (pid_ <= 0) return -1;
        kill(pid_, SIGTERM);
        int status = 0;
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }

private:
    std::string host_;
    pid_t pid_ = -1;
    int port_ = 0;
};

}  // namespace kvstash::test
