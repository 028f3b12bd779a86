// The process-wide cache of token masks, shared by every matcher of the same grammar on the same
// vocabulary (a server answering one schema many times starts its requests warm).
//
// A mask is keyed by (vocabulary fingerprint, the parsed grammar's elements, the matcher state written
// as grammar positions, which do not depend on one matcher's node numbering): two matchers that reach
// the same state compute the same mask, so either's may be used. Bounded by bytes (masks + keys),
// least recently used evicted first; thread-safe (one mutex; a lookup is a hash of a short key).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvstash::grammar {

using Mask = std::vector<uint64_t>;

class MaskCache {
public:
    static MaskCache& instance();

    // A short id for (vocabulary fingerprint, grammar key): the prefix of that grammar's state keys.
    uint64_t space(uint64_t vocabulary_fingerprint, const std::string& grammar_key);
    // Null when absent.
    std::shared_ptr<const Mask> find(const std::string& key);
    void insert(const std::string& key, std::shared_ptr<const Mask> mask);

    size_t bytes() const;
    size_t entries() const;
    size_t capacity() const;
    void set_capacity(size_t bytes);  // evicts down to it; 0 disables the cache
    void clear();

private:
    struct Entry {
        std::shared_ptr<const Mask> mask;
        std::list<std::string>::iterator lru;
    };
    void evict_locked();
    static size_t cost(const std::string& key, const Mask& mask);

    mutable std::mutex mutex_;
    size_t capacity_ = size_t{64} << 20;
    size_t bytes_ = 0;
    std::list<std::string> lru_;  // most recent first
    std::unordered_map<std::string, Entry> entries_;
    std::unordered_map<std::string, uint64_t> spaces_;  // fingerprint + grammar key -> id
    uint64_t next_space_ = 0;
};

}  // namespace kvstash::grammar
