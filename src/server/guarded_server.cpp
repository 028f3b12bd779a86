#include "server/guarded_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>

#include "server/api_error.h"

namespace kvstash::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string peer_address(int fd, int* port) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    *port = 0;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
        inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
        *port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
        inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
        *port = ntohs(a->sin6_port);
    }
    return text;
}

bool wait_for(int fd, short events, std::chrono::milliseconds timeout) {
    pollfd p{fd, events, 0};
    for (;;) {
        const int ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
        if (ready < 0 && errno == EINTR) continue;
        return ready > 0 && !(p.revents & (POLLERR | POLLNVAL));
    }
}

// The socket as cpp-httplib's request processing reads and writes it: each wait bounded by a timeout.
class Connection : public httplib::Stream {
public:
    Connection(int fd, std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout)
        : fd_(fd), read_timeout_(read_timeout), write_timeout_(write_timeout) {}
    bool is_readable() const override { return wait_for(fd_, POLLIN, read_timeout_); }
    // As cpp-httplib's own stream: writable, and the peer has not closed (a streaming handler stops on false).
    bool is_writable() const override { return wait_for(fd_, POLLOUT, write_timeout_) && peer_alive(); }
    ssize_t read(char* ptr, size_t size) override {
        if (!is_readable()) return -1;
        for (;;) {
            const ssize_t n = ::recv(fd_, ptr, size, 0);
            if (n < 0 && errno == EINTR) continue;
            return n;
        }
    }
    ssize_t write(const char* ptr, size_t size) override {
        if (!is_writable()) return -1;
        for (;;) {
            const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) continue;
            return n;
        }
    }
    void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = peer_address(fd_, &port); }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        sockaddr_storage addr{};
        socklen_t len = sizeof addr;
        ip.clear();
        port = 0;
        if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
        char text[INET6_ADDRSTRLEN] = {};
        if (addr.ss_family == AF_INET) {
            const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
            inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
            port = ntohs(a->sin_port);
        } else if (addr.ss_family == AF_INET6) {
            const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
            inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
            port = ntohs(a->sin6_port);
        }
        ip = text;
    }
    socket_t socket() const override { return fd_; }

private:
    bool peer_alive() const {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 0) <= 0) return true;  // nothing to read: still there
        if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
        char byte;
        const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    }

    int fd_;
    std::chrono::milliseconds read_timeout_;
    std::chrono::milliseconds write_timeout_;
};

// Answers a refused connection and closes it. Its unread bytes are drained for a moment first (up to
// 1 MiB or 1 s), so that closing does not reset the connection before the client reads the answer.
void refuse_and_close(int fd, int status, const char* reason, const std::string& message, const char* code) {
    const std::string body = error_json(status, message, "", code).dump();
    const std::string response =
        "HTTP/1.1 " + std::to_string(status) + " " + reason +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\nConnection: close\r\n\r\n" + body;
    Connection connection(fd, std::chrono::milliseconds(1000), std::chrono::milliseconds(1000));
    for (size_t sent = 0; sent < response.size();) {
        const ssize_t n = connection.write(response.data() + sent, response.size() - sent);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
    }
    ::shutdown(fd, SHUT_WR);
    char sink[16384];
    const Clock::time_point until = Clock::now() + std::chrono::seconds(1);
    for (size_t drained = 0; drained < (1u << 20) && Clock::now() < until;) {
        if (!wait_for(fd, POLLIN, std::chrono::milliseconds(100))) continue;
        const ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n <= 0) break;
        drained += static_cast<size_t>(n);
    }
    ::close(fd);
}

}  // namespace

bool GuardedServer::admit(const std::string& address) {
    if (limits_.max_per_address <= 0) return true;
    const std::lock_guard lock(mutex_);
    int& count = per_address_[address];
    if (count >= limits_.max_per_address) return false;
    ++count;
    return true;
}

void GuardedServer::release(const std::string& address) {
    if (limits_.max_per_address <= 0) return;
    const std::lock_guard lock(mutex_);
    if (auto it = per_address_.find(address); it != per_address_.end() && --it->second <= 0) per_address_.erase(it);
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
    int port = 0;
    const std::string address = peer_address(sock, &port);
    if (!admit(address)) {
        refuse_and_close(sock, 429, "Too Many Requests",
                         "this address holds " + std::to_string(limits_.max_per_address) +
                             " connections already (--max-connections-per-ip); close one and retry",
                         "too_many_connections");
        return false;
    }
    RequestHeadLimits head = limits_.head;
    // The reserve: with 3/4 of the threads waiting for heads, a new connection's head must come quickly.
    const int waiting = ++waiting_for_head_;
    if (waiting * 4 >= limits_.max_connections * 3) {
        head.first_byte = std::min(head.first_byte, limits_.head_under_pressure);
        head.whole_head = std::min(head.whole_head, limits_.head_under_pressure);
    }
    const RequestHead outcome = wait_for_request_head(sock, head, [this] { return !is_running(); });
    --waiting_for_head_;
    bool ok = false;
    if (outcome == RequestHead::complete) {
        Connection connection(
            sock,
            std::chrono::seconds(read_timeout_sec_) +
                std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::microseconds(read_timeout_usec_)),
            std::chrono::seconds(write_timeout_sec_) +
                std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::microseconds(write_timeout_usec_)));
        bool connection_closed = false;
        ok = process_request(connection, /*close_connection=*/true, connection_closed, nullptr);
        ::shutdown(sock, SHUT_RDWR);
        ::close(sock);
    } else if (outcome == RequestHead::timed_out) {
        refuse_and_close(sock, 408, "Request Timeout",
                         "the request head (request line and headers) did not arrive within " +
                             std::to_string(head.whole_head.count()) + " ms (--header-timeout), or paused for " +
                             std::to_string(head.between_bytes.count()) + " ms (--read-timeout)",
                         "request_timeout");
    } else if (outcome == RequestHead::too_large) {
        refuse_and_close(sock, 431, "Request Header Fields Too Large",
                         "a header line is over " + std::to_string(head.max_line_bytes) +
                             " bytes, or the request head over " + std::to_string(head.max_head_bytes) +
                             " (--max-header-bytes)",
                         "header_too_large");
    } else {
        ::close(sock);
    }
    release(address);
    return ok;
}

}  // namespace kvstash::server
