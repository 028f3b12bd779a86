// The process-wide mask cache of mask_cache.h.
#include "grammar/mask_cache.h"

#include <cstring>

#include "grammar/class_run_table.h"
#include "kvstash/grammar.h"

namespace kvstash::grammar {

namespace {
constexpr size_t kMaxSpaces = 1024;  // (vocabulary, grammar) ids remembered; each holds the grammar's key
}  // namespace

MaskCache& MaskCache::instance() {
    static MaskCache cache;
    return cache;
}

uint64_t MaskCache::space(uint64_t vocabulary_fingerprint, const std::string& grammar_key) {
    std::string k(sizeof vocabulary_fingerprint, '\0');
    std::memcpy(k.data(), &vocabulary_fingerprint, sizeof vocabulary_fingerprint);
    k += grammar_key;
    const std::lock_guard lock(mutex_);
    // Ids are never reused, so forgetting the table (many distinct grammars) is safe: a grammar seen
    // again gets a new id, and the old id's masks age out of the LRU.
    if (spaces_.size() >= kMaxSpaces) spaces_.clear();
    const auto [it, inserted] = spaces_.emplace(std::move(k), next_space_);
    if (inserted) ++next_space_;
    return it->second;
}

size_t MaskCache::cost(const std::string& key, const Mask& mask) {
    return 2 * key.size() + mask.size() * sizeof(uint64_t) + 128;  // key twice (map + list) + node overheads
}

std::shared_ptr<const Mask> MaskCache::find(const std::string& key) {
    const std::lock_guard lock(mutex_);
    const auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.mask;
}

void MaskCache::insert(const std::string& key, std::shared_ptr<const Mask> mask) {
    const std::lock_guard lock(mutex_);
    if (capacity_ == 0 || entries_.count(key)) return;
    bytes_ += cost(key, *mask);
    lru_.push_front(key);
    entries_.emplace(key, Entry{std::move(mask), lru_.begin()});
    evict_locked();
}

void MaskCache::evict_locked() {
    while (bytes_ > capacity_ && !lru_.empty()) {
        const auto it = entries_.find(lru_.back());
        bytes_ -= cost(it->first, *it->second.mask);
        entries_.erase(it);
        lru_.pop_back();
    }
}

size_t MaskCache::bytes() const {
    const std::lock_guard lock(mutex_);
    return bytes_;
}

size_t MaskCache::entries() const {
    const std::lock_guard lock(mutex_);
    return entries_.size();
}

size_t MaskCache::capacity() const {
    const std::lock_guard lock(mutex_);
    return capacity_;
}

void MaskCache::set_capacity(size_t bytes) {
    const std::lock_guard lock(mutex_);
    capacity_ = bytes;
    evict_locked();
}

void MaskCache::clear() {
    const std::lock_guard lock(mutex_);
    entries_.clear();
    lru_.clear();
    bytes_ = 0;
}

}  // namespace kvstash::grammar

namespace kvstash {

GrammarMaskCacheStats grammar_mask_cache_stats() {
    const auto& cache = grammar::MaskCache::instance();
    return {cache.bytes(), cache.entries(), cache.capacity()};
}

void set_grammar_mask_cache_capacity(size_t bytes) { grammar::MaskCache::instance().set_capacity(bytes); }

void clear_grammar_mask_cache() {
    grammar::MaskCache::instance().clear();
    grammar::clear_class_run_tables();
}

}  // namespace kvstash
