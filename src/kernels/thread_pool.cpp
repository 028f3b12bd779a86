// Persistent workers woken by a condition variable per `run`; tasks are handed out dynamically through
// an atomic counter (which thread runs a task never changes a result, see thread_pool.h).
#include "kernels/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvstash/error.h"

namespace kvstash {
namespace {
// The pool whose task the current thread is running, if any: a nested `run` on the same pool executes
// inline instead of deadlocking on `run_mutex`.
thread_local const void* tls_running_pool = nullptr;

struct RunningPoolScope {
    const void* saved;
    explicit RunningPoolScope(const void* pool) : saved(tls_running_pool) { tls_running_pool = pool; }
    ~RunningPoolScope() { tls_running_pool = saved; }
};
}  // namespace

struct ThreadPool::Impl {
    std::vector<std::thread> workers;

    std::mutex run_mutex;  // one `run` at a time when several callers share a pool

    std::mutex mutex;  // guards everything below
    std::condition_variable work_ready;
    std::condition_variable work_done;
    uint64_t generation = 0;  // bumped for each run; workers wait for a new value
    bool stopping = false;
    int workers_busy = 0;  // workers still inside the current run

    // The current job (valid while a run is in flight).
    const std::function<void(int64_t)>* fn = nullptr;
    int64_t n_tasks = 0;
    std::atomic<int64_t> next_task{0};
    std::exception_ptr first_error;  // guarded by `mutex`

    // Takes tasks until none is left. An exception stops this thread's share; the remaining tasks are
    // still drained by the others (each task is independent), and the first error is reported.
    void work() {
        RunningPoolScope scope(this);
        for (;;) {
            const int64_t task = next_task.fetch_add(1, std::memory_order_relaxed);
            if (task >= n_tasks) return;
            try {
                (*fn)(task);
            } catch (...) {
                std::lock_guard<std::mutex> lock(mutex);
                if (!first_error) first_error = std::current_exception();
                // Skip the rest: the caller gets an exception, not partial results.
                next_task.store(n_tasks, std::memory_order_relaxed);
                return;
            }
        }
    }

    void worker_loop() {
        uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(mutex);
                work_ready.wait(lock, [&] { return stopping || generation != seen; });
                if (stopping) return;
                seen = generation;
            }
            work();
            {
                std::lock_guard<std::mutex> lock(mutex);
                if (--workers_busy == 0) work_done.notify_one();
            }
        }
    }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()), n_threads_(n_threads) {
    if (n_threads < 1) {
        throw Error(ErrorCode::invalid_argument,
                    "thread pool needs at least 1 thread, got " + std::to_string(n_threads));
    }
    impl_->workers.reserve(static_cast<size_t>(n_threads - 1));
    for (int i = 0; i < n_threads - 1; ++i) impl_->workers.emplace_back([impl = impl_.get()] { impl->worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        impl_->stopping = true;
    }
    impl_->work_ready.notify_all();
    for (std::thread& t : impl_->workers) t.join();
}

void ThreadPool::run(int64_t n_tasks, const std::function<void(int64_t task)>& fn) {
    if (n_tasks <= 0) return;
    Impl& p = *impl_;
    if (p.workers.empty() || n_tasks == 1 || tls_running_pool == &p) {
        for (int64_t t = 0; t < n_tasks; ++t) fn(t);
        return;
    }
    std::lock_guard<std::mutex> run_lock(p.run_mutex);
    {
        std::lock_guard<std::mutex> lock(p.mutex);
        p.fn = &fn;
        p.n_tasks = n_tasks;
        p.next_task.store(0, std::memory_order_relaxed);
        p.first_error = nullptr;
        p.workers_busy = static_cast<int>(p.workers.size());
        ++p.generation;
    }
    p.work_ready.notify_all();
    p.work();
    std::exception_ptr error;
    {
        std::unique_lock<std::mutex> lock(p.mutex);
        p.work_done.wait(lock, [&] { return p.workers_busy == 0; });
        p.fn = nullptr;
        error = p.first_error;
        p.first_error = nullptr;
    }
    if (error) std::rethrow_exception(error);
}

}  // namespace kvstash
