// Persistent workers; tasks are handed out dynamically through an atomic counter (which thread runs a
// task never changes a result, see thread_pool.h).
//
// Wake-up latency matters: one decoded token runs about 8 jobs per layer (7 matmuls and attention),
// each a few microseconds long. So a worker that has finished a job first polls for kSpinTime waiting
// for the next one (a start then costs well under a microsecond), and only then sleeps on a futex
// (std::atomic::wait; a wake-up costs a system call and a reschedule, ~5-50 us). The caller waits for
// the workers at the end of a run the same way.
//
// A machine with more runnable threads than cores (other processes) must not turn every run into a wait
// for a descheduled worker: the caller waits only for the workers that joined the run. A worker joins
// by incrementing `active` and checking that the run is not closed yet; the caller closes the run once
// no task is left to hand out, then waits for `active` to drop to zero. A worker that wakes up after
// that finds the run closed and goes back to waiting; its share was done by the others.
#include "backends/cpu/runtime/thread_pool.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

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

// How long a waiting thread polls before it sleeps. Longer than the gap between two jobs of a decode
// step (single-threaded norm / rope / KV store, a few microseconds), far shorter than a time slice.
constexpr auto kSpinTime = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");  // ARM's spin-wait hint, as pause is x86's
#else
    std::this_thread::yield();
#endif
}

// Polls until `done()` holds or kSpinTime has passed; returns done().
template <class Done>
bool spin_until(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (done()) return true;
            cpu_relax();
        }
        if (std::chrono::steady_clock::now() > deadline) return done();
    }
}
}  // namespace

struct ThreadPool::Impl {
    std::vector<std::thread> workers;

    std::mutex run_mutex;  // one `run` at a time when several callers share a pool

    // Start signal: bumped after the job fields below are written; workers wait for a new value.
    // `sleeping_workers` counts workers blocked in generation.wait(), so that the caller makes the
    // notify system call only when someone sleeps. All flags that pair up across threads (Dekker
    // patterns: sleeping_workers / generation, active / closed, active / caller_sleeping) use seq_cst.
    std::atomic<uint32_t> generation{0};
    std::atomic<int> sleeping_workers{0};
    std::atomic<bool> stopping{false};
    std::atomic<uint32_t> closed{0};  // the generation whose tasks are all handed out
    std::atomic<int> active{0};       // workers inside the current run
    std::atomic<bool> caller_sleeping{false};

    // The current job (written by the caller before the generation bump, read-only while it runs).
    const std::function<void(int64_t)>* fn = nullptr;
    int64_t n_tasks = 0;
    std::atomic<int64_t> next_task{0};
    std::mutex error_mutex;
    std::exception_ptr first_error;  // guarded by error_mutex

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
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!first_error) first_error = std::current_exception();
                // Skip the rest: the caller gets an exception, not partial results.
                next_task.store(n_tasks, std::memory_order_relaxed);
                return;
            }
        }
    }

    // Returns when the generation differs from `seen` or the pool is stopping. (`stopping` is checked
    // too: a worker that joined a run may have read the stop bump of the generation as its `seen`.)
    void wait_for_new_generation(uint32_t seen) {
        auto ready = [&] {
            return stopping.load(std::memory_order_seq_cst) || generation.load(std::memory_order_seq_cst) != seen;
        };
        if (spin_until(ready)) return;
        sleeping_workers.fetch_add(1, std::memory_order_seq_cst);
        while (!ready()) generation.wait(seen, std::memory_order_seq_cst);
        sleeping_workers.fetch_sub(1, std::memory_order_relaxed);
    }

    void leave_run() {
        if (active.fetch_sub(1, std::memory_order_seq_cst) == 1 && caller_sleeping.load(std::memory_order_seq_cst)) {
            active.notify_one();
        }
    }

    void worker_loop() {
        uint32_t seen = 0;
        for (;;) {
            wait_for_new_generation(seen);
            if (stopping.load(std::memory_order_acquire)) return;
            active.fetch_add(1, std::memory_order_seq_cst);
            // Re-read after joining: the run this worker takes part in is the current one, unless it is
            // closed (then its caller may already be gone and the job fields reused).
            const uint32_t g = generation.load(std::memory_order_seq_cst);
            seen = g;
            if (closed.load(std::memory_order_seq_cst) != g) work();
            leave_run();
        }
    }

    void start_workers() {
        generation.fetch_add(1, std::memory_order_seq_cst);
        if (sleeping_workers.load(std::memory_order_seq_cst) > 0) generation.notify_all();
    }

    // Closes the current run (every task has been handed out) and waits for the workers inside it.
    void finish_run() {
        closed.store(generation.load(std::memory_order_relaxed), std::memory_order_seq_cst);
        if (spin_until([&] { return active.load(std::memory_order_acquire) == 0; })) return;
        caller_sleeping.store(true, std::memory_order_seq_cst);
        for (int n; (n = active.load(std::memory_order_seq_cst)) != 0;) active.wait(n, std::memory_order_seq_cst);
        caller_sleeping.store(false, std::memory_order_relaxed);
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
    impl_->stopping.store(true, std::memory_order_seq_cst);
    impl_->start_workers();
    impl_->generation.notify_all();
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
    p.fn = &fn;
    p.n_tasks = n_tasks;
    p.next_task.store(0, std::memory_order_relaxed);
    p.first_error = nullptr;
    p.start_workers();  // publishes the fields above
    p.work();
    p.finish_run();
    p.fn = nullptr;
    std::exception_ptr error = p.first_error;
    p.first_error = nullptr;
    if (error) std::rethrow_exception(error);
}

}  // namespace kvstash
