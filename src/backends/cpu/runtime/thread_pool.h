// A persistent pool of worker threads. `run(n_tasks, fn)` calls fn(task) for every task in [0, n_tasks)
// across the workers and the calling thread, and returns when all are done. No thread is created
// per call. Which thread runs a task never changes a result: kernels split work by output rows and
// every output element is computed by exactly one task with a fixed reduction order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace kvstash {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);  // n_threads >= 1 (the caller counts as one)
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int n_threads() const { return n_threads_; }
    void run(int64_t n_tasks, const std::function<void(int64_t task)>& fn);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int n_threads_;
};

}  // namespace kvstash
