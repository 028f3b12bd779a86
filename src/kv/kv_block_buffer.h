// The bytes of one half (K or V) of a KV block: memory from a KvBlockAllocator (host: KvBlockPool), not
// zero-filled. The buffer keeps its allocator: copies are made in the same memory.
//
// It replaces std::vector<uint8_t> in KvBlock with the members its users call (data(), size(), empty(),
// begin()/end()), so that code reading blocks (state_file_write, the prefix cache) is unchanged. Unlike
// a vector, KvBlockBuffer(n) leaves the bytes uninitialised: a restore overwrites them at once, and
// evaluation writes a row before attention reads it. Copying copies the bytes (copy-on-write in KvCache).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kv/kv_block_allocator.h"

namespace kvstash {

class KvBlockBuffer {
public:
    KvBlockBuffer() = default;
    explicit KvBlockBuffer(size_t bytes, KvBlockAllocator& allocator = host_kv_allocator())
        : allocator_(&allocator), data_(bytes ? allocator.allocate(bytes) : nullptr), size_(bytes) {}
    ~KvBlockBuffer() {
        if (data_ != nullptr) allocator_->release(data_, size_);
    }

    KvBlockBuffer(const KvBlockBuffer& other) : KvBlockBuffer(other.size_, *other.allocator_) {
        if (size_ != 0) allocator_->copy(data_, other.data_, size_);
    }
    KvBlockBuffer& operator=(const KvBlockBuffer& other) {
        if (this != &other) {
            KvBlockBuffer copy(other);
            swap(copy);
        }
        return *this;
    }
    KvBlockBuffer(KvBlockBuffer&& other) noexcept
        : allocator_(other.allocator_),
          data_(std::exchange(other.data_, nullptr)),
          size_(std::exchange(other.size_, 0)) {}
    KvBlockBuffer& operator=(KvBlockBuffer&& other) noexcept {
        KvBlockBuffer moved(std::move(other));
        swap(moved);
        return *this;
    }
    void swap(KvBlockBuffer& other) noexcept {
        std::swap(allocator_, other.allocator_);
        std::swap(data_, other.data_);
        std::swap(size_, other.size_);
    }

    KvBlockAllocator& allocator() const { return *allocator_; }
    // The bytes in the allocator's memory: for the forward pass's ops and KvBlockStaging only (device
    // memory is not readable here).
    uint8_t* data() { return data_; }
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    uint8_t* begin() { return data_; }
    uint8_t* end() { return data_ + size_; }
    const uint8_t* begin() const { return data_; }
    const uint8_t* end() const { return data_ + size_; }

    // As std::vector::resize: keeps the first min(old, n) bytes and zero-fills the rest (for callers
    // that build a host block byte by byte; KvCache itself allocates with KvBlockBuffer(n)).
    void resize(size_t n) {
        if (n == size_) return;
        KvBlockBuffer bigger(n, *allocator_);
        const size_t kept = n < size_ ? n : size_;
        if (kept != 0) std::memcpy(bigger.data_, data_, kept);
        if (n > kept) std::memset(bigger.data_ + kept, 0, n - kept);
        swap(bigger);
    }

private:
    KvBlockAllocator* allocator_ = &host_kv_allocator();
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace kvstash
