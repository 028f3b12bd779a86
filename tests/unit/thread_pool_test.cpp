// ThreadPool: every task runs exactly once, work really is shared, exceptions reach the caller, and the
// pool stays usable afterwards.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backends/cpu/runtime/thread_pool.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

TEST(ThreadPool, RunsEveryTaskExactlyOnce) {
    for (int n_threads : {1, 2, 3, 5}) {
        ThreadPool pool(n_threads);
        EXPECT_EQ(pool.n_threads(), n_threads);
        for (int64_t n_tasks : {0, 1, 2, 7, 64, 1000}) {
            std::vector<std::atomic<int>> count(static_cast<size_t>(n_tasks));
            pool.run(n_tasks, [&](int64_t t) { count[static_cast<size_t>(t)].fetch_add(1); });
            for (int64_t t = 0; t < n_tasks; ++t) {
                ASSERT_EQ(count[static_cast<size_t>(t)].load(), 1)
                    << n_threads << " threads, task " << t << "/" << n_tasks;
            }
        }
    }
}

TEST(ThreadPool, ManyRunsReuseTheSameWorkers) {
    ThreadPool pool(3);
    std::mutex mutex;
    std::set<std::thread::id> ids;
    int64_t total = 0;
    for (int run = 0; run < 2000; ++run) {
        std::atomic<int64_t> sum{0};
        pool.run(5, [&](int64_t t) {
            sum += t;
            std::lock_guard<std::mutex> lock(mutex);
            ids.insert(std::this_thread::get_id());
        });
        ASSERT_EQ(sum.load(), 10);
        total += sum.load();
    }
    EXPECT_EQ(total, 20000);
    EXPECT_LE(ids.size(), 3u);  // the caller plus 2 persistent workers, never a thread per run
}

TEST(ThreadPool, TasksRunConcurrently) {
    ThreadPool pool(2);
    // Two tasks that each wait for the other to start: only possible if two threads run them.
    std::atomic<int> started{0};
    std::atomic<bool> both_seen{true};
    pool.run(2, [&](int64_t) {
        started.fetch_add(1);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (started.load() < 2) {
            if (std::chrono::steady_clock::now() > deadline) {
                both_seen = false;
                return;
            }
            std::this_thread::yield();
        }
    });
    EXPECT_TRUE(both_seen.load());
}

TEST(ThreadPool, ExceptionReachesCallerAndPoolStaysUsable) {
    for (int n_threads : {1, 2, 4}) {
        ThreadPool pool(n_threads);
        try {
            pool.run(100, [&](int64_t t) {
                if (t == 37) throw Error(ErrorCode::internal, "task 37 failed");
            });
            FAIL() << "no exception";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::internal);
            EXPECT_STREQ(e.what(), "task 37 failed");
        }
        EXPECT_THROW(pool.run(3, [](int64_t) { throw std::runtime_error("every task"); }), std::runtime_error);
        std::atomic<int> n{0};
        pool.run(50, [&](int64_t) { ++n; });
        EXPECT_EQ(n.load(), 50);
    }
}

TEST(ThreadPool, NestedRunExecutesInline) {
    ThreadPool pool(2);
    std::atomic<int> inner{0};
    pool.run(4, [&](int64_t) { pool.run(3, [&](int64_t) { ++inner; }); });
    EXPECT_EQ(inner.load(), 12);
}

TEST(ThreadPool, RejectsZeroThreads) {
    EXPECT_THROW(ThreadPool(0), Error);
    EXPECT_THROW(ThreadPool(-3), Error);
}

}  // namespace
}  // namespace kvstash
