// The prefix cache's Redis tier: full KV blocks as Redis values, shared by every replica pointing at the
// same Redis (include/kvstash/prefix_cache.h, PrefixCacheOptions::redis_url, says what users see).
//
// Key "kvstash:blk:v1:<32 hex digits>" (the block's content key, prefix_cache_key.h; v1 = the block file
// format version), value = the bytes of the block's file (prefix_cache_disk_file.h), so a value is
// verified exactly as a file is: header fields (key, parent, tokens, model + adapters fingerprint, KV
// type, numerics path, shape), size and payload checksum. A refused value is deleted (best effort) and counted.
//
// Reads are synchronous (each bounded by the client's io timeout, and skipped at once while it backs
// off); writes go through a queue to one background thread, which skips blocks Redis already holds
// (EXISTS) and SETs the others. Thread-safe. A PrefixTier (prefix_tier.h) of blocks only.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "base/redis_client.h"
#include "engine/prefix_tier.h"

namespace kvstash {

constexpr const char* kRedisBlockKeyPrefix = "kvstash:blk:v1:";

class PrefixRedisTier final : public PrefixTier {
public:
    // Throws Error(invalid_argument) for a bad URL; does not connect (Redis may come up later).
    PrefixRedisTier(const std::string& url, RedisTimeouts timeouts, uint64_t queue_bytes);
    // Writes what is queued for at most two seconds more, then drops the rest.
    ~PrefixRedisTier() override;
    PrefixRedisTier(const PrefixRedisTier&) = delete;
    PrefixRedisTier& operator=(const PrefixRedisTier&) = delete;

    // The block from Redis, verified against `block` and `id`, in a new KvBlock allocated by a fork of
    // `shape`; nullptr on a miss, an error or a refused value.
    std::shared_ptr<KvBlock> load(const BlockFileName& block, const BlockFileIdentity& id,
                                  const KvCache& shape) override;
    // Queues the block for writing (the KvBlock is shared, immutable while shared); never blocks on Redis.
    void store(const BlockFileName& block, const BlockFileIdentity& id, std::shared_ptr<const KvBlock> kv) override;
    // Waits until the queue is empty (tests, benchmarks); false if `timeout_ms` passed first.
    bool flush(int timeout_ms);

    void fill(PrefixCacheStats& stats) const override;

    static std::string redis_key(const BlockKey& key) { return kRedisBlockKeyPrefix + key.hex(); }

private:
    struct Pending {
        BlockKey key, parent;
        std::array<int32_t, kv_block_tokens> tokens;
        BlockFileIdentity id;
        std::shared_ptr<const KvBlock> kv;
    };
    void write_loop();
    void write_one(const Pending& item);

    RedisClient client_;
    const uint64_t queue_bytes_;
    mutable std::mutex mutex_;
    std::condition_variable wake_, drained_;
    std::deque<Pending> queue_;                          // guarded by mutex_
    std::unordered_set<BlockKey, BlockKeyHash> queued_;  // keys in queue_ or being written
    uint64_t queued_bytes_ = 0;
    bool stopping_ = false, writing_ = false;
    uint64_t hits_ = 0, misses_ = 0, errors_ = 0, rejected_ = 0, write_refused_ = 0, dropped_ = 0, written_ = 0,
             bytes_written_ = 0, bytes_read_ = 0;
    std::thread writer_;  // last: started once everything above exists
};

}  // namespace kvstash
