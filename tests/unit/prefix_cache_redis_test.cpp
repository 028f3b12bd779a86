// The prefix cache's Redis tier, against a real redis-server the test starts on a free loopback port:
// blocks one cache writes are found by another (as a replica would) and give bitwise the logits of a
// cold evaluation; corrupt, truncated and misplaced values are refused, deleted and recomputed; Redis
// down, killed and restarted (empty) or flushed costs no request more than the timeouts, and reuse resumes.
// Also: redis:// URL parsing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "backends/cpu/runtime/dispatch.h"
#include "base/redis_connection.h"
#include "engine/prefix_cache_key.h"
#include "engine/prefix_cache_redis.h"
#include "kvstash/error.h"
#include "kvstash/prefix_cache.h"
#include "state/fingerprint.h"
#include "support/eval_helpers.h"
#include "support/paths.h"
#include "support/redis_server.h"

namespace kvstash::test {
namespace {

constexpr int64_t B = kv_block_tokens;

std::shared_ptr<const Model> tiny() { return Model::load(fixture_path("tiny/gqa_f32.gguf")); }

PrefixCacheOptions redis_options(const RedisServer& redis) {
    PrefixCacheOptions o;
    o.ram_budget_bytes = 0;  // every block leaves RAM when unused: only Redis can answer another cache
    o.redis_url = redis.url();
    return o;
}

// acquire, evaluate the rest, expect the new logits bitwise equal to a cold evaluation, release.
int64_t run_request(PrefixCache& cache, const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens) {
    Evaluator evaluator(model, 1);
    CachedPrefix hit = cache.acquire(tokens);
    std::vector<float> warm;
    evaluator.eval(hit.state, std::span(tokens).subspan(static_cast<size_t>(hit.reused_tokens)), &warm);
    const std::vector<float> cold = eval_logits(model, tokens, {static_cast<int64_t>(tokens.size())}, 1);
    const size_t offset = static_cast<size_t>(hit.reused_tokens * model->n_vocab());
    EXPECT_EQ(warm.size() + offset, cold.size());
    EXPECT_EQ(0, std::memcmp(warm.data(), cold.data() + offset, warm.size() * sizeof(float)))
        << "logits after reusing " << hit.reused_tokens << " cached tokens differ from a cold evaluation";
    cache.release(hit.state);
    return hit.reused_tokens;
}

// Write-behind: wait until the cache has written `n` blocks (or 5 s pass).
void wait_written(const PrefixCache& cache, uint64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (cache.stats().redis_blocks_written < n && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(cache.stats().redis_blocks_written, n);
}

std::string key_of(const Model& model, const std::vector<int32_t>& tokens, int64_t index) {
    const PrefixKeyDomain domain(cached_model_fingerprint(model), KvType::f16, current_numerics());
    return PrefixRedisTier::redis_key(domain.chain(tokens, index + 1)[static_cast<size_t>(index)]);
}

#define REQUIRE_REDIS() \
    if (!RedisServer::installed()) GTEST_SKIP() << RedisServer::kSkipMessage

TEST(RedisUrl, ParsesEveryPart) {
    RedisEndpoint at = parse_redis_url("redis://alice:s%40cret@cache.local:6380/3");
    EXPECT_EQ(at.host, "cache.local");
    EXPECT_EQ(at.port, 6380);
    EXPECT_EQ(at.user, "alice");
    EXPECT_EQ(at.password, "s@cret");
    EXPECT_EQ(at.db, 3);
    EXPECT_EQ(at.describe().find("cret"), std::string::npos);
    at = parse_redis_url("redis://127.0.0.1");
    EXPECT_EQ(at.port, 6379);
    EXPECT_EQ(at.db, 0);
    EXPECT_TRUE(at.password.empty());
    at = parse_redis_url("redis://:pw@[::1]:7000/");
    EXPECT_EQ(at.host, "::1");
    EXPECT_EQ(at.port, 7000);
    EXPECT_EQ(at.password, "pw");
    EXPECT_TRUE(at.user.empty());
    for (const char* bad : {"http://x:1", "redis://", "redis://h:99999", "redis://h:1/x", "redis://h:p",
                            "redis://u:%4@h", "rediss://h:6379"}) {
        EXPECT_THROW(parse_redis_url(bad), Error) << bad;
    }
}

TEST(PrefixCacheRedis, AnotherCacheReusesBlocksBitwise) {
    REQUIRE_REDIS();
    RedisServer redis;
    auto model = tiny();
    const auto tokens = pseudo_random_tokens(3 * B + 10, 300, 1);
    {
        PrefixCache writer(*model, redis_options(redis));
        EXPECT_EQ(run_request(writer, model, tokens), 0);
        wait_written(writer, 3);
        EXPECT_EQ(writer.stats().redis_connected, 1u);
    }
    EXPECT_EQ(redis.command({"DBSIZE"}).integer, 3);
    auto replica_model = tiny();  // as another replica: another Model, another cache
    PrefixCache reader(*replica_model, redis_options(redis));
    EXPECT_EQ(run_request(reader, replica_model, tokens), 3 * B);
    const PrefixCacheStats s = reader.stats();
    EXPECT_EQ(s.redis_hits, 3u);
    EXPECT_EQ(s.redis_misses, 0u);  // the request's 3 full blocks were all there (the 4th is partial)
    EXPECT_EQ(s.redis_rejected, 0u);
    EXPECT_GT(s.redis_bytes_read, 0u);
    // Its release offers the same blocks: Redis has them, nothing is written again.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(reader.stats().redis_blocks_written, 0u);
}

TEST(PrefixCacheRedis, CorruptTruncatedAndMisplacedValuesAreRefusedAndRecomputed) {
    REQUIRE_REDIS();
    RedisServer redis;
    auto model = tiny();
    const auto tokens = pseudo_random_tokens(4 * B + 1, 300, 2);
    {
        PrefixCache writer(*model, redis_options(redis));
        run_request(writer, model, tokens);
        wait_written(writer, 4);
    }
    const std::string k0 = key_of(*model, tokens, 0), k1 = key_of(*model, tokens, 1);
    std::string value = redis.command({"GET", k1}).text;
    ASSERT_FALSE(value.empty());
    value[value.size() / 2] = static_cast<char>(value[value.size() / 2] ^ 1);  // one bit of the payload
    ASSERT_TRUE(redis.command({"SET", k1, value}).ok());
    {
        PrefixCache reader(*model, redis_options(redis));
        EXPECT_EQ(run_request(reader, model, tokens), B);  // block 0 only: block 1 is refused
        EXPECT_EQ(reader.stats().redis_rejected, 1u);
        wait_written(reader, 1);  // block 1 recomputed and written again; blocks 2 and 3 were still there
    }
    // Truncated, and another block's (valid) value under block 0's key.
    const std::string good0 = redis.command({"GET", k0}).text;
    ASSERT_TRUE(redis.command({"SET", k0, good0.substr(0, good0.size() - 1)}).ok());
    {
        PrefixCache reader(*model, redis_options(redis));
        EXPECT_EQ(run_request(reader, model, tokens), 0);
        EXPECT_EQ(reader.stats().redis_rejected, 1u);
    }
    ASSERT_TRUE(redis.command({"SET", k0, redis.command({"GET", k1}).text}).ok());
    PrefixCache reader(*model, redis_options(redis));
    EXPECT_EQ(run_request(reader, model, tokens), 0);
    EXPECT_EQ(reader.stats().redis_rejected, 1u);
    wait_written(reader, 1);  // deleted, then written again by the release
    EXPECT_EQ(redis.command({"GET", k0}).text, good0);
}

// Down from the start, killed, restarted empty, flushed: every lookup answers (a miss) within the
// timeouts, errors are counted, nothing is thrown, and reuse resumes by itself once Redis is back.
TEST(PrefixCacheRedis, FaultsCostAtMostATimeoutAndReuseResumes) {
    REQUIRE_REDIS();
    RedisServer redis;
    redis.stop();
    auto model = tiny();
    const auto tokens = pseudo_random_tokens(2 * B + 1, 300, 3);
    PrefixCacheOptions options = redis_options(redis);
    {
        PrefixCache cache(*model, options);
        const auto timed_acquire = [&](PrefixCache& c) {
            const auto start = std::chrono::steady_clock::now();
            const CachedPrefix hit = c.acquire(tokens);
            const auto ms =
                std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
            EXPECT_LT(ms, options.redis_connect_timeout_ms + options.redis_io_timeout_ms + 200);
            return hit.reused_tokens;
        };
        EXPECT_EQ(timed_acquire(cache), 0);
        EXPECT_EQ(run_request(cache, model, tokens), 0);
        EXPECT_GT(cache.stats().redis_errors, 0u);
        EXPECT_EQ(cache.stats().redis_connected, 0u);

        redis.start();
        // The backoff after the failures above is at most a few hundred ms here; then writes go through.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (cache.stats().redis_blocks_written < 2 && std::chrono::steady_clock::now() < deadline) {
            run_request(cache, model, tokens);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        ASSERT_EQ(cache.stats().redis_blocks_written, 2u);
        PrefixCache replica(*model, options);
        EXPECT_EQ(run_request(replica, model, tokens), 2 * B);

        redis.stop();  // killed mid-use: a lookup fails fast, the answer is still exact
        PrefixCache during(*model, options);
        EXPECT_EQ(timed_acquire(during), 0);
        EXPECT_EQ(run_request(during, model, tokens), 0);
        redis.start();  // restarted, empty (no persistence)
        const uint64_t before = cache.stats().redis_blocks_written;
        const auto deadline2 = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (cache.stats().redis_blocks_written < before + 2 && std::chrono::steady_clock::now() < deadline2) {
            run_request(cache, model, tokens);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        ASSERT_EQ(cache.stats().redis_blocks_written, before + 2);
        PrefixCache after_restart(*model, options);
        EXPECT_EQ(run_request(after_restart, model, tokens), 2 * B);

    }  // every cache above written out (its destructor waits for its write-behind queue)
    ASSERT_TRUE(redis.command({"FLUSHALL"}).ok());  // flushed: a plain miss
    PrefixCache after_flush(*model, options);
    EXPECT_EQ(run_request(after_flush, model, tokens), 0);
    EXPECT_EQ(after_flush.stats().redis_errors, 0u);
}

// A full Redis (maxmemory reached, policy noeviction) refuses writes with OOM: counted, never fatal.
TEST(PrefixCacheRedis, WritesRefusedByAFullRedisAreCounted) {
    REQUIRE_REDIS();
    RedisServer redis({"--maxmemory", "1", "--maxmemory-policy", "noeviction"});  // full from the start
    auto model = tiny();
    const auto tokens = pseudo_random_tokens(7 * B + 1, 300, 4);
    PrefixCache cache(*model, redis_options(redis));
    run_request(cache, model, tokens);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (cache.stats().redis_write_refused == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_GT(cache.stats().redis_write_refused, 0u);
    run_request(cache, model, tokens);  // whatever part of the prefix Redis kept: still exact
}

}  // namespace
}  // namespace kvstash::test

namespace kvstash::test {
namespace {

// A Redis that stops answering (DEBUG SLEEP: the server is blocked, connections stay open): the first
// lookup waits one io timeout, then the client backs off and the next ones do not wait at all.
TEST(PrefixCacheRedis, ASlowRedisCostsOneTimeoutThenNothing) {
    REQUIRE_REDIS();
    RedisServer redis({"--enable-debug-command", "yes"});
    auto model = tiny();
    const auto tokens = pseudo_random_tokens(3 * B + 1, 300, 6);
    PrefixCacheOptions options = redis_options(redis);
    options.redis_io_timeout_ms = 300;
    PrefixCache cache(*model, options);
    run_request(cache, model, tokens);  // connected, blocks written
    wait_written(cache, 3);
    std::thread sleeper([&] { redis.command({"DEBUG", "SLEEP", "1"}); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server is asleep now
    PrefixCache other(*model, options);
    const auto elapsed_ms = [&](PrefixCache& c) {
        const auto start = std::chrono::steady_clock::now();
        EXPECT_EQ(c.acquire(tokens).reused_tokens, 0);
        return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    };
    const auto first = elapsed_ms(other);
    EXPECT_GE(first, options.redis_io_timeout_ms - 50);
    EXPECT_LT(first, options.redis_io_timeout_ms + options.redis_connect_timeout_ms + 300);
    EXPECT_LT(elapsed_ms(other), 50);  // backing off: no wait
    EXPECT_GT(other.stats().redis_errors, 0u);
    sleeper.join();
    // Awake again: after the backoff, reuse resumes by itself.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int64_t reused = 0;
    while (reused == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        reused = run_request(other, model, tokens);
    }
    EXPECT_EQ(reused, 3 * B);
}

}  // namespace
}  // namespace kvstash::test
