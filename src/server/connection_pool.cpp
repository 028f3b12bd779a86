#include "server/connection_pool.h"

#include <algorithm>

namespace kvstash::server {

ConnectionPool::ConnectionPool(size_t max_threads, std::chrono::milliseconds idle_exit)
    : max_threads_(std::max<size_t>(max_threads, 1)), idle_exit_(idle_exit) {}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> task) {
    std::unique_lock<std::mutex> lock(mutex_);
    join_exited_locked(lock);
    tasks_.push_back(std::move(task));
    // A new thread only when the queued tasks outnumber the threads free to take them.
    if (tasks_.size() > idle_ && threads_.size() < max_threads_) {
        threads_.emplace_back([this] { work(); });
    } else {
        wake_.notify_one();
    }
}

void ConnectionPool::shutdown() {
    std::vector<std::thread> threads;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        shutdown_ = true;
        wake_.notify_all();
        threads.swap(threads_);
        exited_.clear();
    }
    for (std::thread& t : threads) {
        if (t.joinable()) t.join();
    }
}

size_t ConnectionPool::threads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return threads_.size() - exited_.size();
}

size_t ConnectionPool::queued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return tasks_.size();
}

void ConnectionPool::work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        ++idle_;
        const bool woken = wake_.wait_for(lock, idle_exit_, [this] { return !tasks_.empty() || shutdown_; });
        --idle_;
        if (!woken) {
            // Idle past idle_exit with nothing queued: end, and let the next enqueue join this thread.
            exited_.push_back(std::this_thread::get_id());
            return;
        }
        if (tasks_.empty()) return;  // shutdown with nothing left to run
        std::function<void()> task = std::move(tasks_.front());
        tasks_.pop_front();
        lock.unlock();
        task();
        lock.lock();
    }
}

void ConnectionPool::join_exited_locked(std::unique_lock<std::mutex>& lock) {
    if (exited_.empty()) return;
    std::vector<std::thread> done;
    for (std::thread::id id : exited_) {
        auto it =
            std::find_if(threads_.begin(), threads_.end(), [id](const std::thread& t) { return t.get_id() == id; });
        if (it == threads_.end()) continue;
        done.push_back(std::move(*it));
        threads_.erase(it);
    }
    exited_.clear();
    // An exited thread has returned from work() or is about to (it gave up the lock on its way out): joining
    // it waits at most for that, but not under our lock.
    lock.unlock();
    for (std::thread& t : done) t.join();
    lock.lock();
}

}  // namespace kvstash::server
