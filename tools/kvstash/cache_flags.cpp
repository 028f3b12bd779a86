#include "kvstash/cache_flags.h"

namespace kvstash::cli {

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
}

std::unique_ptr<PrefixCache> open_prefix_cache(const Model& model, const CacheFlags& flags,
                                               std::shared_ptr<const AdapterSet> adapters) {
    if (flags.dir.empty()) return nullptr;
    PrefixCacheOptions options;
    options.ram_budget_bytes = flags.ram_mib << 20;
    options.disk_dir = flags.dir;
    options.disk_budget_bytes = flags.disk_mib << 20;
    options.adapters = std::move(adapters);
    return std::make_unique<PrefixCache>(model, options);
}

}  // namespace kvstash::cli
