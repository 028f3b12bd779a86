#include "kvstash/cache_flags.h"

namespace kvstash::cli {

void add_redis_cache_flags(CLI::App& cmd, std::string& url, int& connect_timeout_ms, int& io_timeout_ms) {
    cmd.add_option("--cache-redis", url,
                   "prefix cache Redis tier, shared by every process pointing at it: "
                   "redis://[user:password@]host:port[/db] (full blocks written behind, read when RAM and disk "
                   "miss, verified; Redis down or slow = compute; see docs/deploy.md)");
    cmd.add_option("--redis-connect-timeout", connect_timeout_ms,
                   "milliseconds a Redis connect may take (then compute, and retry after a backoff)")
        ->check(CLI::Range(1, 60000))
        ->capture_default_str();
    cmd.add_option("--redis-timeout", io_timeout_ms, "milliseconds a Redis command may take (then compute)")
        ->check(CLI::Range(1, 60000))
        ->capture_default_str();
}

void add_cache_flags(CLI::App& cmd, CacheFlags& flags, const std::string& dir_help) {
    auto* dir = cmd.add_option("--cache-dir", flags.dir, dir_help);
    cmd.add_option("--cache-ram", flags.ram_mib,
                   "MiB of KV blocks the cache keeps in memory when unused (with --cache-dir)")
        ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 24))
        ->capture_default_str()
        ->needs(dir);
    cmd.add_option("--cache-disk", flags.disk_mib,
                   "MiB of block files kept in --cache-dir (least recently used deleted first)")
        ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 24))
        ->capture_default_str()
        ->needs(dir);
    add_redis_cache_flags(cmd, flags.redis, flags.redis_connect_timeout_ms, flags.redis_io_timeout_ms);
}

std::unique_ptr<PrefixCache> open_prefix_cache(const Model& model, const CacheFlags& flags,
                                               std::shared_ptr<const AdapterSet> adapters) {
    if (flags.dir.empty() && flags.redis.empty()) return nullptr;
    PrefixCacheOptions options;
    options.ram_budget_bytes = flags.ram_mib << 20;
    options.disk_dir = flags.dir;
    options.redis_url = flags.redis;
    options.redis_connect_timeout_ms = flags.redis_connect_timeout_ms;
    options.redis_io_timeout_ms = flags.redis_io_timeout_ms;
    options.disk_budget_bytes = flags.disk_mib << 20;
    options.adapters = std::move(adapters);
    return std::make_unique<PrefixCache>(model, options);
}

}  // namespace kvstash::cli
