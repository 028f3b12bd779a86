// ConnectionPool: a thread per task while tasks block (so N blocked connections never starve the next),
// bounded by max_threads, idle threads ending, shutdown running what is queued.
#include "server/connection_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace kvstash::server {
namespace {

using namespace std::chrono_literals;

// Blocks every task until released: the stand-in for idle clients holding their connection's thread.
struct Gate {
    std::mutex mutex;
    std::condition_variable cv;
    bool open = false;
    void wait() {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [this] { return open; });
    }
    void release() {
        std::lock_guard<std::mutex> lock(mutex);
        open = true;
        cv.notify_all();
    }
};

TEST(ConnectionPool, BlockedTasksDoNotStarveTheNextOne) {
    ConnectionPool pool(1024, 30s);
    Gate gate;
    std::atomic<int> started{0};
    for (int i = 0; i < 300; ++i)
        pool.enqueue([&] {
            ++started;
            gate.wait();
        });
    // The 301st task (a /health request behind 300 idle connections) runs while the others still block.
    std::promise<void> ran;
    pool.enqueue([&] { ran.set_value(); });
    EXPECT_EQ(ran.get_future().wait_for(10s), std::future_status::ready);
    EXPECT_EQ(pool.threads(), 301u);
    gate.release();
    pool.shutdown();
    EXPECT_EQ(started.load(), 300);
}

TEST(ConnectionPool, BeyondMaxThreadsTasksWaitTheirTurn) {
    ConnectionPool pool(4, 30s);
    Gate gate;
    std::atomic<int> done{0};
    for (int i = 0; i < 10; ++i)
        pool.enqueue([&] {
            gate.wait();
            ++done;
        });
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(pool.threads(), 4u);
    EXPECT_EQ(pool.queued(), 6u);
    gate.release();
    pool.shutdown();
    EXPECT_EQ(done.load(), 10);
}

TEST(ConnectionPool, IdleThreadsEndAndAreReplaced) {
    ConnectionPool pool(64, 100ms);
    std::atomic<int> done{0};
    for (int i = 0; i < 8; ++i) pool.enqueue([&] { ++done; });
    for (int i = 0; i < 100 && pool.threads() > 0; ++i) std::this_thread::sleep_for(20ms);
    EXPECT_EQ(pool.threads(), 0u);
    std::promise<void> ran;
    pool.enqueue([&] { ran.set_value(); });
    EXPECT_EQ(ran.get_future().wait_for(10s), std::future_status::ready);
    pool.shutdown();
    EXPECT_EQ(done.load(), 8);
}

TEST(ConnectionPool, ShutdownRunsWhatIsQueued) {
    std::atomic<int> done{0};
    {
        ConnectionPool pool(2, 30s);
        for (int i = 0; i < 50; ++i)
            pool.enqueue([&] {
                std::this_thread::sleep_for(1ms);
                ++done;
            });
    }  // the destructor shuts down
    EXPECT_EQ(done.load(), 50);
}

}  // namespace
}  // namespace kvstash::server
