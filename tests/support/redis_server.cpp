#include "support/redis_server.h"

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace kvstash::test {
namespace {

std::string find_redis_server() {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
        const std::string path = std::string(dir) + "/redis-server";
        if (::access(path.c_str(), X_OK) == 0) return path;
    }
    return {};
}

// A port the kernel just handed out for an ephemeral bind: free now (tiny race, fine for tests).
int free_loopback_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        if (fd >= 0) ::close(fd);
        throw std::runtime_error("cannot find a free loopback port");
    }
    ::close(fd);
    return ntohs(addr.sin_port);
}

}  // namespace

bool RedisServer::installed() { return !find_redis_server().empty(); }

RedisServer::RedisServer(std::vector<std::string> extra) : extra_(std::move(extra)) {
    char tmpl[] = "/tmp/kvstash_redis_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    port_ = free_loopback_port();
    start();
}

RedisServer::~RedisServer() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

void RedisServer::start() {
    if (pid_ > 0) return;
    std::vector<std::string> argv{find_redis_server(),
                                  "--port",
                                  std::to_string(port_),
                                  "--bind",
                                  "127.0.0.1",
                                  "--save",
                                  "",
                                  "--appendonly",
                                  "no",
                                  "--dir",
                                  dir_,
                                  "--daemonize",
                                  "no",
                                  "--logfile",
                                  dir_ + "/redis.log",
                                  "--protected-mode",
                                  "yes"};
    argv.insert(argv.end(), extra_.begin(), extra_.end());
    std::vector<char*> c_args;
    for (auto& a : argv) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    if (::posix_spawn(&pid_, c_args[0], nullptr, nullptr, c_args.data(), environ) != 0) {
        pid_ = -1;
        throw std::runtime_error("cannot start " + argv[0]);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
        const RedisReply r = command({"PING"});
        if (r.kind == RedisReply::Kind::status) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop();
    throw std::runtime_error("redis-server did not answer PING on port " + std::to_string(port_) + " (log in " + dir_ +
                             "/redis.log)");
}

void RedisServer::stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
}

RedisReply RedisServer::command(std::initializer_list<std::string_view> args) const {
    std::string why;
    const RedisEndpoint at{"127.0.0.1", port_, "", "", 0};
    std::unique_ptr<RedisConnection> c = RedisConnection::open(at, {200, 2000}, why);
    if (!c) return RedisReply{RedisReply::Kind::io_error, why, 0, {}};
    return c->command(args);
}

}  // namespace kvstash::test
