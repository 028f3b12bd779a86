// Two `kvstash serve` replicas sharing one redis-server (--cache-redis, --state-store) behind nginx, which
// this test starts and stops (issue 17). As root, each replica is a separate host: its own network
// namespace, joined to this one by a veth pair (tests/support/netns.h), Redis and nginx on this side;
// otherwise (or with KVSTASH_TEST_NO_NETNS=1) all run on loopback ports. The test prints which mode ran
// and records it as the property replica_mode (netns / ports).
//   - a long system prompt computed through replica A is reused by replica B (cached_tokens >= 95% of
//     it), with the same answer;
//   - Redis killed mid-test: requests keep succeeding; restarted (empty): reuse across replicas resumes;
//   - values corrupted in Redis: refused (counted in /metrics), recomputed, the same answer;
//   - a named state created on A is used on B; one uploaded to A is used on B; deleted on B, gone on A.
// Replica B runs the AVX2 kernels (KVSTASH_ISA=avx2) and A the best this CPU has (AVX-512 where present):
// every CPU path computes the same bits (numerics path "cpu", issue 32), so B takes A's blocks and states as
// bitwise its own and answers alike; were the ISA still part of the identity, B would find nothing to reuse.
// Four prompts of ~730 tokens are computed in all (SmolLM2-135M): about 20 s on a quiet 2-core machine.
// nginx routes on an X-Replica header (a test-only map; the deployment guide's config is plain
// round-robin) so the test knows which replica served what. Skips when redis-server or nginx is missing.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <thread>

#include "backends/cpu/runtime/numerics.h"
#include "e2e/server/http_client.h"
#include "support/netns.h"
#include "support/redis_server.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

std::string nginx_binary() {
    for (const char* path : {"/usr/sbin/nginx", "/usr/bin/nginx"})
        if (::access(path, X_OK) == 0) return path;
    return {};
}

// A port in 20000-31999 that nothing listens on now (below the ephemeral range, where the client ends
// of connections live, as tests/reliability/proxy_probes.sh picks nginx's).
int free_port_below_ephemeral() {
    for (int i = 0; i < 200; ++i) {
        const int port = 20000 + static_cast<int>((::getpid() * 7919 + i * 104729) % 12000);
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<uint16_t>(port));
        const bool free = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
        if (fd >= 0) ::close(fd);
        if (free) return port;
    }
    throw std::runtime_error("no free port for nginx");
}

// nginx in the foreground as this user, everything under a temp dir; stopped when destroyed.
class Nginx {
public:
    // `a`, `b`: the replicas' "host:port".
    Nginx(const std::string& a, const std::string& b) {
        char tmpl[] = "/tmp/kvstash_nginx_XXXXXX";
        if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
        dir_ = tmpl;
        port_ = free_port_below_ephemeral();
        std::ofstream(dir_ + "/nginx.conf")
            << "daemon off;\nmaster_process off;\npid " << dir_ << "/nginx.pid;\nerror_log " << dir_ << "/error.log;\n"
            << "events { worker_connections 256; }\nhttp {\n    access_log off;\n"
            << "    client_body_temp_path " << dir_ << "/body; proxy_temp_path " << dir_
            << "/proxy;\n    fastcgi_temp_path " << dir_ << "/fcgi; uwsgi_temp_path " << dir_
            << "/uwsgi; scgi_temp_path " << dir_ << "/scgi;\n"
            << "    client_max_body_size 256m;\n"
            << "    upstream kvstash { server " << a << "; server " << b << "; }\n"
            << "    upstream replica_a { server " << a << "; }\n"
            << "    upstream replica_b { server " << b << "; }\n"
            << "    map $http_x_replica $backend { a replica_a; b replica_b; "
               "default kvstash; }\n"
            << "    server {\n        listen 127.0.0.1:" << port_
            << ";\n        location / {\n            proxy_pass http://$backend;\n"
            << "            proxy_http_version 1.1;\n            proxy_buffering off;\n"
            << "            proxy_read_timeout 600s;\n        }\n    }\n}\n";
        std::vector<std::string> argv{nginx_binary(),      "-p", dir_, "-e", dir_ + "/error.log", "-c",
                                      dir_ + "/nginx.conf"};
        std::vector<char*> c_args;
        for (auto& a : argv) c_args.push_back(a.data());
        c_args.push_back(nullptr);
        if (::posix_spawn(&pid_, c_args[0], nullptr, nullptr, c_args.data(), environ) != 0)
            throw std::runtime_error("cannot start nginx");
        httplib::Client c("127.0.0.1", port_);
        for (int i = 0; i < 100; ++i) {
            if (auto res = c.Get("/health"); res && res->status == 200) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        throw std::runtime_error("nginx did not come up on port " + std::to_string(port_) + " (see " + dir_ +
                                 "/error.log)");
    }
    ~Nginx() {
        if (pid_ > 0) {
            ::kill(pid_, SIGTERM);
            ::waitpid(pid_, nullptr, 0);
        }
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(120, 0);
        return c;
    }

private:
    std::string dir_;
    int port_ = 0;
    pid_t pid_ = -1;
};

// A system prompt of about `words` words, different per `seed`.
std::string long_system_prompt(int words, int seed) {
    static const char* vocabulary[] = {"river",  "mountain", "library", "orange", "signal", "harbor", "winter",
                                       "copper", "garden",   "lantern", "meadow", "engine", "silver", "canyon"};
    std::string text = "You are assistant number " + std::to_string(seed) + ". Background notes follow.";
    for (int i = 0; i < words; ++i) text += std::string(" ") + vocabulary[(i * 7 + seed * 3 + i / 5) % 14];
    return text + ". Answer briefly.";
}

json chat_body(const std::string& system) {
    return json{
        {"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "Say hello."}}}},
        {"max_tokens", 6},
        {"temperature", 0}};
}

Reply chat_on(httplib::Client& front, const char* replica, const std::string& system) {
    return post(front, "/v1/chat/completions", chat_body(system).dump(), {{"X-Replica", replica}});
}

int cached_tokens(const Reply& r) { return r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(); }
std::string content(const Reply& r) { return r.body["choices"][0]["message"]["content"].get<std::string>(); }

double metric_of(const ServerProcess& server, const char* name) {
    httplib::Client c = server.client();
    auto res = c.Get("/metrics");
    return res ? metric_value(res->body, name) : -1.0;
}

// Sends the prompt through `replica` until its server has written at least `blocks` more blocks to Redis
// (write-behind; writes are dropped while it backs off after Redis was down), at most 15 s. Returns the
// first reply.
Reply serve_until_written(httplib::Client& front, const char* replica, const ServerProcess& server,
                          const std::string& system, int blocks) {
    const double before = metric_of(server, "kvstash_cache_redis_blocks_written_total");
    const Reply first = chat_on(front, replica, system);
    EXPECT_EQ(first.status, 200) << first.text;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
        for (int i = 0; i < 20; ++i) {
            if (metric_of(server, "kvstash_cache_redis_blocks_written_total") >= before + blocks) return first;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        EXPECT_EQ(chat_on(front, replica, system).status, 200);  // a RAM hit: offers the blocks again
    }
    ADD_FAILURE() << "replica " << replica << " did not write its blocks to Redis";
    return first;
}

TEST(ServerRedisReplicas, ReplicasShareBlocksAndStatesThroughRedis) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    if (!RedisServer::installed()) GTEST_SKIP() << RedisServer::kSkipMessage;
    if (nginx_binary().empty()) GTEST_SKIP() << "nginx is not installed (Debian nginx-light; scripts/setup.sh)";
    // Declared first, destroyed last: the processes inside are stopped before the namespaces go.
    std::unique_ptr<NetnsHost> ns_a = NetnsHost::create(0);
    std::unique_ptr<NetnsHost> ns_b = ns_a ? NetnsHost::create(1) : nullptr;
    if (!ns_b) ns_a.reset();
    const bool separate_hosts = ns_b != nullptr;
    RecordProperty("replica_mode", separate_hosts ? "netns" : "ports");
    std::cout << "[ INFO     ] replicas run "
              << (separate_hosts ? "as separate hosts (network namespaces, veth)" : "on loopback ports") << std::endl;
    std::vector<std::string> redis_args{"--maxmemory", "512mb", "--maxmemory-policy", "allkeys-lru"};
    if (separate_hosts)  // also on this host's veth ends (no password: reachable from the namespaces only)
        redis_args.insert(redis_args.end(), {"--bind", "127.0.0.1", ns_a->host_address(), ns_b->host_address(),
                                             "--protected-mode", "no"});
    RedisServer redis(redis_args);
    auto replica = [&](const NetnsHost* ns) {
        const std::string url = ns ? "redis://" + ns->host_address() + ":" + std::to_string(redis.port()) : redis.url();
        const std::vector<std::string> args{"-t", "2", "--cache-redis", url, "--state-store", url};
        return std::make_unique<ServerProcess>(args, "",
                                               ns ? ServerPlace{ns->inner_address(), ns->launcher()} : ServerPlace{});
    };
    const std::unique_ptr<ServerProcess> a_process = replica(ns_a.get());
    // B on the AVX2 kernels where this CPU has them (the environment is copied when B is spawned).
    const std::vector<std::string> isas = isa_settings();
    const bool has_avx512 = std::find(isas.begin(), isas.end(), "avx512") != isas.end();
    const bool b_on_avx2 = has_avx512 && std::find(isas.begin(), isas.end(), "avx2") != isas.end();
    const std::string a_isa = has_avx512 ? "avx512" : isas.back();  // the dispatch's choice: the best ISA
    std::cout << "[ INFO     ] replica A runs " << a_isa << ", replica B " << (b_on_avx2 ? "avx2" : a_isa) << std::endl;
    RecordProperty("replica_b_isa", b_on_avx2 ? "avx2" : a_isa);
    const char* inherited_isa = std::getenv("KVSTASH_ISA");
    const std::string restore = inherited_isa ? inherited_isa : "";
    if (b_on_avx2) ::setenv("KVSTASH_ISA", "avx2", 1);
    const std::unique_ptr<ServerProcess> b_process = replica(ns_b.get());
    if (b_on_avx2) inherited_isa ? ::setenv("KVSTASH_ISA", restore.c_str(), 1) : ::unsetenv("KVSTASH_ISA");
    const ServerProcess &a = *a_process, &b = *b_process;
    Nginx nginx(a.host() + ":" + std::to_string(a.port()), b.host() + ":" + std::to_string(b.port()));
    httplib::Client front = nginx.client();

    // 1. Computed through A, reused by B.
    const std::string system = long_system_prompt(700, 1);
    httplib::Client direct = a.client();
    const Reply tokenized = post(direct, "/tokenize", json{{"content", system}});
    ASSERT_EQ(tokenized.status, 200) << tokenized.text;
    const auto system_tokens = static_cast<int>(tokenized.body["tokens"].size());
    ASSERT_GT(system_tokens, 600);
    const int blocks = system_tokens / 32 - 1;
    const Reply on_a = serve_until_written(front, "a", a, system, blocks);
    ASSERT_EQ(on_a.status, 200) << on_a.text;
    EXPECT_EQ(cached_tokens(on_a), 0);
    const Reply on_b = chat_on(front, "b", system);
    ASSERT_EQ(on_b.status, 200) << on_b.text;
    EXPECT_GE(cached_tokens(on_b), system_tokens * 95 / 100);
    EXPECT_EQ(content(on_b), content(on_a));
    EXPECT_GT(metric_of(b, "kvstash_cache_redis_hits_total"), 0);
    EXPECT_EQ(metric_of(b, "kvstash_cache_redis_up"), 1);

    // 2. Redis killed: requests keep succeeding (B computes what it has not seen).
    redis.stop();
    const std::string second = long_system_prompt(700, 2);
    const Reply b_alone = chat_on(front, "b", second);
    ASSERT_EQ(b_alone.status, 200) << b_alone.text;
    for (int i = 0; i < 4; ++i) EXPECT_EQ(get(front, "/health").status, 200);  // round-robin, both up
    EXPECT_GT(metric_of(b, "kvstash_cache_redis_errors_total"), 0);
    EXPECT_EQ(metric_of(b, "kvstash_cache_redis_up"), 0);

    // 3. Restarted, empty: reuse across replicas resumes by itself.
    redis.start();
    const std::string third = long_system_prompt(700, 3);
    const Reply third_on_a = serve_until_written(front, "a", a, third, blocks);
    const Reply resumed = chat_on(front, "b", third);
    ASSERT_EQ(resumed.status, 200) << resumed.text;
    EXPECT_GE(cached_tokens(resumed), system_tokens * 95 / 100);
    EXPECT_EQ(content(resumed), content(third_on_a));

    // 4. B offers the second prompt's blocks again (a RAM hit, now written); each is corrupted in Redis;
    // A refuses them all and computes: the same answer B gave.
    const RedisReply before_keys = redis.command({"KEYS", "kvstash:blk:*"});
    const std::set<std::string> before(before_keys.strings.begin(), before_keys.strings.end());
    serve_until_written(front, "b", b, second, blocks);
    int corrupted = 0;
    for (const std::string& key : redis.command({"KEYS", "kvstash:blk:*"}).strings) {
        if (before.contains(key)) continue;
        std::string value = redis.command({"GET", key}).text;
        value[value.size() - 7] = static_cast<char>(value[value.size() - 7] ^ 0x40);  // in V's last row
        ASSERT_TRUE(redis.command({"SET", key, value}).ok());
        ++corrupted;
    }
    EXPECT_GE(corrupted, blocks);
    const Reply refused = chat_on(front, "a", second);
    ASSERT_EQ(refused.status, 200) << refused.text;
    EXPECT_LT(cached_tokens(refused), 32);  // at most the start it shares with A's other prompts, from RAM
    EXPECT_EQ(content(refused), content(b_alone));
    EXPECT_GT(metric_of(a, "kvstash_cache_redis_rejected_total"), 0);

    // 4. Named states: created on A, used on B; uploaded to A, used on B; deleted on B, gone on A.
    const json state_body{{"name", "shared-system"}, {"messages", {{{"role", "system"}, {"content", system}}}}};
    const Reply created = post(front, "/v1/states", state_body.dump(), {{"X-Replica", "a"}});
    ASSERT_EQ(created.status, 201) << created.text;
    json from_state = chat_body(system);
    from_state["state"] = "shared-system";
    const Reply used = post(front, "/v1/chat/completions", from_state.dump(), {{"X-Replica", "b"}});
    ASSERT_EQ(used.status, 200) << used.text;
    EXPECT_EQ(content(used), content(on_a));
    EXPECT_GE(cached_tokens(used), created.body["tokens"].get<int>());
    EXPECT_EQ(post(front, "/v1/states", state_body.dump(), {{"X-Replica", "b"}}).status, 409);
    auto file = front.Get("/v1/states/shared-system/file", {{"X-Replica", "b"}});
    ASSERT_TRUE(file);
    ASSERT_EQ(file->status, 200);
    auto put = front.Put("/v1/states/uploaded/file", {{"X-Replica", "a"}}, file->body, "application/octet-stream");
    ASSERT_TRUE(put);
    ASSERT_EQ(put->status, 201) << put->body;
    from_state["state"] = "uploaded";
    const Reply used_upload = post(front, "/v1/chat/completions", from_state.dump(), {{"X-Replica", "b"}});
    ASSERT_EQ(used_upload.status, 200) << used_upload.text;
    EXPECT_EQ(content(used_upload), content(on_a));
    auto broken = front.Put("/v1/states/broken/file", {{"X-Replica", "a"}}, file->body.substr(0, 1000),
                            "application/octet-stream");
    ASSERT_TRUE(broken);
    EXPECT_EQ(broken->status, 400);
    auto deleted = front.Delete("/v1/states/uploaded", {{"X-Replica", "b"}});
    ASSERT_TRUE(deleted);
    EXPECT_EQ(deleted->status, 200);
    httplib::Client direct_a = a.client();
    EXPECT_EQ(get(direct_a, "/v1/states/uploaded").status, 404);
    const Reply listed = get(direct_a, "/v1/states");
    ASSERT_EQ(listed.body["data"].size(), 1u) << listed.text;
}

}  // namespace
}  // namespace kvstash::test
