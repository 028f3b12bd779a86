// Waiting for a request's head (request line and headers) before cpp-httplib reads it, with limits
// cpp-httplib 0.11 does not have: a deadline for the whole head (it only bounds each wait between
// bytes, so a client trickling a byte every few seconds held a thread forever), and a size for a header
// line and for the head (it reads a header line of any length into memory: four 64 MiB lines cost 460 MB).
//
// The bytes are only looked at (MSG_PEEK), never taken: cpp-httplib then reads the same head, which is
// complete in the socket's buffer. While waiting, SO_RCVLOWAT makes poll() wake on new bytes only.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

namespace kvstash::server {

struct RequestHeadLimits {
    std::chrono::milliseconds first_byte{5000};      // a new connection's wait for its first byte (--idle-timeout)
    std::chrono::milliseconds whole_head{10000};     // from the first wait to the blank line that ends the head
    std::chrono::milliseconds between_bytes{10000};  // silence once the head has begun (--read-timeout)
    size_t max_head_bytes = 32 * 1024;               // request line, headers and the blank line (431 past it)
    size_t max_line_bytes = 8 * 1024;                // one request or header line (431 past it)
};

enum class RequestHead {
    complete,   // the whole head is in the socket's buffer, within the limits
    closed,     // the client closed (or sent nothing within first_byte): close without an answer
    timed_out,  // the head did not complete within whole_head: 408
    too_large,  // a line or the whole head over its limit: 431
};

// Waits on connected socket `fd` as the limits say; gives up (closed) soon after `stopping` turns true.
// Leaves SO_RCVLOWAT at 1.
RequestHead wait_for_request_head(int fd, const RequestHeadLimits& limits, const std::function<bool()>& stopping);

}  // namespace kvstash::server
