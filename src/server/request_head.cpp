#include "server/request_head.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kvstash::server {
namespace {

using Clock = std::chrono::steady_clock;

// complete when `head` holds a blank line (CRLF CRLF, or LF LF as cpp-httplib also accepts); too_large
// when a line, finished or not, or the head is over its limit; closed means "not yet" here.
RequestHead check(std::string_view head, const RequestHeadLimits& limits) {
    size_t line_start = 0;
    for (size_t i = 0; i < head.size(); ++i) {
        if (head[i] != '\n') continue;
        const size_t line_end = i > line_start && head[i - 1] == '\r' ? i - 1 : i;
        if (i + 1 - line_start > limits.max_line_bytes) return RequestHead::too_large;
        if (line_end == line_start && line_start > 0) return RequestHead::complete;  // the blank line
        line_start = i + 1;
    }
    if (head.size() - line_start > limits.max_line_bytes || head.size() >= limits.max_head_bytes)
        return RequestHead::too_large;
    return RequestHead::closed;
}

void set_low_water(int fd, int bytes) { setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof bytes); }

}  // namespace

RequestHead wait_for_request_head(int fd, const RequestHeadLimits& limits, const std::function<bool()>& stopping) {
    std::vector<char> buffer(limits.max_head_bytes);
    const Clock::time_point start = Clock::now();
    Clock::time_point last_byte = start;
    RequestHead outcome = RequestHead::closed;
    size_t seen = 0;
    for (;;) {
        const Clock::time_point deadline = seen == 0
                                               ? start + limits.first_byte
                                               : std::min(start + limits.whole_head, last_byte + limits.between_bytes);
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            outcome = seen == 0 ? RequestHead::closed : RequestHead::timed_out;
            break;
        }
        if (stopping()) break;
        // Wake when more than the `seen` bytes are buffered (poll honours SO_RCVLOWAT for TCP).
        set_low_water(fd, static_cast<int>(seen + 1));
        pollfd p{fd, POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 200)));
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) break;
        if (ready == 0) continue;  // the deadline check above decides
        const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) break;  // closed by the client
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
            break;
        }
        // Readable with no byte more than last time: the client closed its side (or the socket failed).
        if (static_cast<size_t>(n) <= seen) break;
        seen = static_cast<size_t>(n);
        last_byte = Clock::now();
        outcome = check(std::string_view(buffer.data(), seen), limits);
        if (outcome != RequestHead::closed) break;
    }
    set_low_water(fd, 1);
    return outcome;
}

}  // namespace kvstash::server
