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
    uint64_t ram_mib = 1024;
    uint64_t disk_mib = 4096;
};

// Adds the three options; `dir_help` says what the subcommand does with the directory.
void add_cache_flags(CLI::App& cmd, CacheFlags& flags, const std::string& dir_help);
// The cache on flags.dir (created if missing), or null without --cache-dir.
// `adapters`: the set whose States it holds (null = none).
std::unique_ptr<PrefixCache> open_prefix_cache(const Model& model, const CacheFlags& flags,
                                               std::shared_ptr<const AdapterSet> adapters = {});

}  // namespace kvstash::cli
