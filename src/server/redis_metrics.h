// The prefix cache's Redis tier in /metrics (Prometheus text): hits, misses, errors, refused values,
// bytes, and whether Redis answers now (all zero without a Redis tier).
#pragma once

#include <ostream>

#include "kvstash/prefix_cache.h"

namespace kvstash::server {

void write_redis_cache_metrics(std::ostream& out, const PrefixCacheStats& cache);

}  // namespace kvstash::server
