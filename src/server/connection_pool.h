// The threads that serve HTTP connections: one thread per open connection, created when a connection
// arrives and no thread is free, up to `max_threads`; beyond that, connections wait (first come, first
// served) for a thread to free up. A thread left without work for `idle_exit` ends.
//
// Why not a fixed pool: cpp-httplib (0.11) serves a connection on one thread from its first byte to
// its close, so with a fixed pool of N threads, N idle or slowly-trickling clients leave none for
// anyone else, /health included. Growing per connection keeps every client its own thread; a thread
// waiting on a socket costs its touched stack pages (tens of KiB; the 8 MiB stack is only reserved).
//
//   ConnectionPool pool(1024, std::chrono::seconds(30));
//   pool.enqueue([sock] { serve(sock); });
//   pool.shutdown();  // runs what is queued, then joins every thread
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvstash::server {

class ConnectionPool {
public:
    ConnectionPool(size_t max_threads, std::chrono::milliseconds idle_exit);
    ~ConnectionPool();
    ConnectionPool(const ConnectionPool&) = delete;
    ConnectionPool& operator=(const ConnectionPool&) = delete;

    // Never blocks (the caller is the accept loop).
    void enqueue(std::function<void()> task);
    // Runs every queued task, then joins the threads. Idempotent.
    void shutdown();

    // For tests and metrics.
    size_t threads() const;
    size_t queued() const;

private:
    void work();
    void join_exited_locked(std::unique_lock<std::mutex>& lock);

    const size_t max_threads_;
    const std::chrono::milliseconds idle_exit_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> tasks_;
    std::vector<std::thread> threads_;     // live or exited-not-yet-joined
    std::vector<std::thread::id> exited_;  // ended after idle_exit, to be joined
    size_t idle_ = 0;                      // threads waiting for a task
    bool shutdown_ = false;
};

}  // namespace kvstash::server
