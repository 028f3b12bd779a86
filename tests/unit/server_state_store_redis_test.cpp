// RedisStateStore against a real redis-server: a state put through one store (one replica) is forked,
// listed and deleted through another; uploads are validated by the loader before anything is kept; a
// corrupt value is refused with the loader's error; Redis down is a 503 within the timeouts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kvstash/evaluator.h"
#include "kvstash/state_file.h"
#include "server/api_error.h"
#include "server/state_store_redis.h"
#include "support/eval_helpers.h"
#include "support/paths.h"
#include "support/redis_server.h"

namespace kvstash::test {
namespace {

using server::ApiError;
using server::RedisStateStore;

std::string file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

TEST(RedisStateStore, ReplicasShareNamedStates) {
    if (!RedisServer::installed()) GTEST_SKIP() << RedisServer::kSkipMessage;
    RedisServer redis;
    auto model = Model::load(fixture_path("tiny/gqa_f32.gguf"));
    Evaluator evaluator(model, 1);
    State state(*model);
    const auto tokens = pseudo_random_tokens(70, 300, 5);
    evaluator.eval(state, tokens);

    RedisStateStore a(*model, redis.url(), {100, 2000}), b(*model, redis.url(), {100, 2000});
    EXPECT_FALSE(b.fork("s").has_value());
    const server::NamedStateInfo put = a.put("s", state.fork());
    EXPECT_EQ(put.n_tokens, 70);
    EXPECT_GT(put.file_bytes, 0u);
    std::optional<State> forked = b.fork("s");
    ASSERT_TRUE(forked.has_value());
    EXPECT_EQ(std::vector<int32_t>(forked->tokens().begin(), forked->tokens().end()), tokens);
    ASSERT_TRUE(b.info("s").has_value());
    EXPECT_EQ(b.info("s")->n_tokens, 70);
    EXPECT_TRUE(b.info("s")->in_memory);
    ASSERT_EQ(b.list().size(), 1u);

    // Replaced through A: B notices (another generation) and loads the new one.
    State longer = state.fork();
    evaluator.eval(longer, std::vector<int32_t>{1, 2, 3});
    a.put("s", std::move(longer));
    EXPECT_EQ(b.fork("s")->n_tokens(), 73);

    // An upload: the writer's file is validated (load_state) before anything is stored.
    const std::string saved =
        (std::filesystem::temp_directory_path() / ("kvstash_redis_state_" + std::to_string(::getpid()) + ".kvs"))
            .string();
    save_state(state, saved);
    const std::string bytes = file_bytes(saved);
    std::filesystem::remove(saved);
    const auto writer = [&](const std::string& content) {
        return [&model, content](int fd, const std::string& path) {
            EXPECT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
            return load_state(*model, path);
        };
    };
    EXPECT_THROW(a.put_file("broken", writer(bytes.substr(0, bytes.size() / 2))), Error);
    EXPECT_FALSE(b.info("broken").has_value());
    a.put_file("uploaded", writer(bytes));
    EXPECT_EQ(b.fork("uploaded")->n_tokens(), 70);

    // A value corrupted in Redis: the loader refuses it, nothing is used.
    std::string corrupt = bytes;
    corrupt[corrupt.size() - 9] = static_cast<char>(corrupt[corrupt.size() - 9] ^ 1);
    ASSERT_TRUE(redis.command({"HSET", a.key_of("uploaded"), "file", corrupt, "gen", "other"}).ok());
    EXPECT_THROW(b.fork("uploaded"), Error);

    EXPECT_TRUE(b.erase("s"));
    EXPECT_FALSE(b.erase("s"));
    EXPECT_FALSE(a.fork("s").has_value());  // A's loaded copy is dropped too
    EXPECT_EQ(a.list().size(), 1u);

    redis.stop();
    const auto start = std::chrono::steady_clock::now();
    try {
        a.info("uploaded");
        ADD_FAILURE() << "no error with Redis down";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 503);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
    EXPECT_NO_THROW(a.totals());  // /metrics still answers
}

}  // namespace
}  // namespace kvstash::test
