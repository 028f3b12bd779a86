#include "server/redis_metrics.h"

#include <cstdint>

namespace kvstash::server {

void write_redis_cache_metrics(std::ostream& out, const PrefixCacheStats& cache) {
    const auto metric = [&out](const char* name, const char* type, const char* help, uint64_t value) {
        out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
            << name << ' ' << value << '\n';
    };
    metric("kvstash_cache_redis_hits_total", "counter", "Blocks read from the Redis tier (not in RAM or on disk).",
           cache.redis_hits);
    metric("kvstash_cache_redis_misses_total", "counter", "Lookups that asked Redis and found no further block.",
           cache.redis_misses);
    metric("kvstash_cache_redis_errors_total", "counter",
           "Redis commands that failed or were skipped while backing off (down, slow, restarting).",
           cache.redis_errors);
    metric("kvstash_cache_redis_rejected_total", "counter",
           "Redis values refused (corrupt, truncated, another model's) and deleted; recomputed instead.",
           cache.redis_rejected);
    metric("kvstash_cache_redis_write_refused_total", "counter",
           "Block writes Redis answered with an error (OOM: maxmemory reached without eviction).",
           cache.redis_write_refused);
    metric("kvstash_cache_redis_writes_dropped_total", "counter",
           "Blocks not written: write-behind queue full, or Redis unreachable.", cache.redis_writes_dropped);
    metric("kvstash_cache_redis_blocks_written_total", "counter", "Blocks written to Redis.",
           cache.redis_blocks_written);
    metric("kvstash_cache_redis_bytes_written_total", "counter", "Bytes of the blocks written to Redis.",
           cache.redis_bytes_written);
    metric("kvstash_cache_redis_bytes_read_total", "counter", "Bytes of the blocks read from Redis and used.",
           cache.redis_bytes_read);
    metric("kvstash_cache_redis_up", "gauge", "1 when the last Redis command of the prefix cache succeeded.",
           cache.redis_connected);
}

}  // namespace kvstash::server
