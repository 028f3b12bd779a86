// The prefix-cache options shared by `kvstash generate` and `kvstash chat`: --cache-dir, --cache-ram,
// --cache-disk, and the PrefixCache they describe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "kvstash/model.h"
#include "kvstash/prefix_cache.h"

namespace kvstash::cli {

struct CacheFlags {
    std::string dir;
    std::string redis;  // --cache-redis URL
    int redis_connect_timeout_ms = 100;
    int redis_io_timeout_ms = 500;
    uint64_t ram_mib = 1024;
    uint64_t disk_mib = 4096;
};

// --cache-redis, --redis-connect-timeout, --redis-timeout (shared with `serve`).
void add_redis_cache_flags(CLI::App& cmd, std::string& url, int& connect_timeout_ms, int& io_timeout_ms);
// Adds the three options (and the Redis ones); `dir_help` says what the subcommand does with the directory.
void add_cache_flags(CLI::App& cmd, CacheFlags& flags, const std::string& dir_help);
// The cache on flags.dir (created if missing) and/or flags.redis, or null without either.
// `adapters`: the set whose States it holds (null = none).
std::unique_ptr<PrefixCache> open_prefix_cache(const Model& model, const CacheFlags& flags,
                                               std::shared_ptr<const AdapterSet> adapters = {});

}  // namespace kvstash::cli
