// A burst of simultaneous requests against `kvstash serve --parallel 4 --queue 2` (issue 33 item 2): the
// four free slots take four of them and the queue two more, so at least six of eight are served and only
// requests beyond slots and queue get 503 queue_full (before: the queue filled while slots were free,
// and 2-3 of 8 were served).
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "e2e/server/http_client.h"

namespace kvstash::test {
namespace {

TEST(ServerBurst, FreeSlotsAreNotQueueFull) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    ServerProcess server({"-t", "2", "--parallel", "4", "--queue", "2"});
    constexpr int kRequests = 8;
    std::vector<Reply> replies(kRequests);
    std::mutex mutex;
    std::condition_variable go;
    int ready = 0;
    std::vector<std::thread> clients;
    for (int i = 0; i < kRequests; ++i) {
        clients.emplace_back([&, i] {
            httplib::Client client = server.client();
            client.set_read_timeout(300, 0);
            (void)client.Get("/health");  // connected before the burst
            const json body = {{"prompt", "Request " + std::to_string(i) + " of a burst: once upon a time"},
                               {"max_tokens", 24},
                               {"seed", i}};
            {
                std::unique_lock lock(mutex);
                ++ready;
                go.notify_all();
                go.wait(lock, [&] { return ready == kRequests; });
            }
            replies[static_cast<size_t>(i)] = post(client, "/v1/completions", body);
        });
    }
    for (auto& t : clients) t.join();
    int served = 0;
    for (const Reply& r : replies) {
        if (r.status == 200) {
            ++served;
            EXPECT_TRUE(r.body["choices"][0]["text"].is_string()) << r.text;
        } else {
            EXPECT_EQ(r.status, 503) << r.text;
            EXPECT_EQ(r.body["error"]["code"], "queue_full") << r.text;
        }
    }
    EXPECT_GE(served, 6) << "4 slots + 2 queued of 8 simultaneous requests";
}

}  // namespace
}  // namespace kvstash::test
