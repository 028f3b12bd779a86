// The Redis tier: verified reads, write-behind (see prefix_cache_redis.h).
#include "engine/prefix_cache_redis.h"

#include <chrono>

#include "kv/kv_block_staging.h"
#include "kvstash/error.h"

namespace kvstash {

PrefixRedisTier::PrefixRedisTier(const std::string& url, RedisTimeouts timeouts, uint64_t queue_bytes)
    : client_(parse_redis_url(url), timeouts), queue_bytes_(queue_bytes), writer_([this] { write_loop(); }) {}

PrefixRedisTier::~PrefixRedisTier() {
    flush(2000);
    {
        const std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    writer_.join();
}

std::shared_ptr<KvBlock> PrefixRedisTier::load(const BlockFileName& block, const BlockFileIdentity& id,
                                               const KvCache& shape) {
    if (shape.block_bytes() != 2 * id.half_bytes()) {
        throw Error(ErrorCode::internal, "PrefixRedisTier::load: block shape and identity disagree");
    }
    const std::string key = redis_key(block.key);
    const RedisReply reply = client_.run({"GET", key});
    if (reply.kind != RedisReply::Kind::string) {
        const std::lock_guard lock(mutex_);
        ++(reply.kind == RedisReply::Kind::nil ? misses_ : errors_);
        return nullptr;
    }
    KvCache fresh = shape.fork();
    fresh.grow(kv_block_tokens);
    KvBlockStaging staging;
    const BlockFileRead decoded =
        decode_block_bytes(reply.text, block, id, staging.write(fresh.writable_block(0), KvHalf::keys).data(),
                           staging.write(fresh.writable_block(0), KvHalf::values).data());
    staging.commit();
    if (decoded != BlockFileRead::ok) {
        // Not this block of this model: never used, and removed so that the next writer replaces it.
        client_.run({"DEL", key});
        const std::lock_guard lock(mutex_);
        ++rejected_;
        return nullptr;
    }
    const std::lock_guard lock(mutex_);
    ++hits_;
    bytes_read_ += reply.text.size();
    return fresh.share_block(0);
}

void PrefixRedisTier::store(const BlockFileName& block, const BlockFileIdentity& id,
                            std::shared_ptr<const KvBlock> kv) {
    {
        const std::lock_guard lock(mutex_);
        if (queued_.contains(block.key)) return;
        if (queued_bytes_ + id.file_bytes() > queue_bytes_) {
            ++dropped_;
            return;
        }
        Pending item{block.key, block.parent, {}, id, std::move(kv)};
        std::copy(block.tokens.begin(), block.tokens.end(), item.tokens.begin());
        queue_.push_back(std::move(item));
        queued_.insert(block.key);
        queued_bytes_ += id.file_bytes();
    }
    wake_.notify_one();
}

bool PrefixRedisTier::flush(int timeout_ms) {
    std::unique_lock lock(mutex_);
    return drained_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                             [this] { return queue_.empty() && !writing_; });
}

void PrefixRedisTier::write_loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        Pending item = std::move(queue_.front());
        queue_.pop_front();
        writing_ = true;
        lock.unlock();
        write_one(item);
        lock.lock();
        writing_ = false;
        queued_.erase(item.key);
        queued_bytes_ -= item.id.file_bytes();
        if (queue_.empty()) drained_.notify_all();
    }
}

void PrefixRedisTier::write_one(const Pending& item) {
    const std::string key = redis_key(item.key);
    // Most releases offer blocks Redis already has (every request releases its whole prefix): one
    // small round trip instead of the block's bytes.
    const RedisReply exists = client_.run({"EXISTS", key});
    if (exists.kind == RedisReply::Kind::integer && exists.integer == 1) return;
    if (exists.kind == RedisReply::Kind::io_error) {
        const std::lock_guard lock(mutex_);
        ++errors_, ++dropped_;
        return;
    }
    const BlockFileName name{item.key, item.parent, std::span<const int32_t, kv_block_tokens>(item.tokens)};
    KvBlockStaging staging;
    const std::string value =
        encode_block_bytes(name, item.id, staging.read(*item.kv, KvHalf::keys), staging.read(*item.kv, KvHalf::values));
    const RedisReply set = client_.run({"SET", key, value});
    const std::lock_guard lock(mutex_);
    if (set.kind == RedisReply::Kind::io_error) {
        ++errors_, ++dropped_;
    } else if (set.kind == RedisReply::Kind::error) {
        ++write_refused_;  // "OOM command not allowed when used memory > 'maxmemory'" and the like
    } else {
        ++written_;
        bytes_written_ += value.size();
    }
}

void PrefixRedisTier::fill(PrefixCacheStats& stats) const {
    const RedisClient::Counters c = client_.counters();
    const std::lock_guard lock(mutex_);
    stats.redis_hits = hits_;
    stats.redis_misses = misses_;
    stats.redis_errors = errors_;
    stats.redis_rejected = rejected_;
    stats.redis_write_refused = write_refused_;
    stats.redis_writes_dropped = dropped_;
    stats.redis_blocks_written = written_;
    stats.redis_bytes_written = bytes_written_;
    stats.redis_bytes_read = bytes_read_;
    stats.redis_connected = c.connected ? 1 : 0;
}

}  // namespace kvstash
