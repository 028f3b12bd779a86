// KvBlockAllocator and KvBlockStaging: a cache on host memory is read and written in place (no copy);
// a cache on memory that is not the host's (a stand-in "device" allocator: host bytes that only its own
// copy / to_host / from_host may touch, counted) moves its bytes through the staging buffers, and its
// copy-on-write and trimming stay in its own memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kv/kv_block_allocator.h"
#include "kv/kv_block_staging.h"
#include "kv/kv_cache.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

class CountingDeviceAllocator final : public KvBlockAllocator {
public:
    MemorySpace space() const override { return MemorySpace::device; }
    uint8_t* allocate(size_t bytes) override {
        ++allocations;
        return static_cast<uint8_t*>(::operator new (bytes, std::align_val_t{64}));
    }
    void release(uint8_t* p, size_t /*bytes*/) noexcept override { ::operator delete (p, std::align_val_t{64}); }
    void copy(uint8_t* dst, const uint8_t* src, size_t n) override {
        ++copies;
        std::memcpy(dst, src, n);
    }
    void to_host(uint8_t* host, const uint8_t* src, size_t n) override {
        ++downloads;
        std::memcpy(host, src, n);
    }
    void from_host(uint8_t* dst, const uint8_t* host, size_t n) override {
        ++uploads;
        std::memcpy(dst, host, n);
    }
    int allocations = 0, copies = 0, downloads = 0, uploads = 0;
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> bytes(n);
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(seed + 7 * i);
    return bytes;
}

TEST(KvBlockStaging, HostBlocksAreReadAndWrittenInPlace) {
    KvCache kv(2, 64, KvType::f16);
    kv.grow(kv_block_tokens);
    KvBlockStaging staging;
    const std::span<uint8_t> k = staging.write(kv.writable_block(0), KvHalf::keys);
    EXPECT_EQ(k.data(), kv.block(0).k.data());  // the block's own bytes: no copy
    EXPECT_EQ(k.size(), kv.block_bytes() / 2);
    const std::vector<uint8_t> bytes = pattern(k.size(), 3);
    std::memcpy(k.data(), bytes.data(), bytes.size());
    staging.commit();
    const std::span<const uint8_t> back = staging.read(kv.block(0), KvHalf::keys);
    EXPECT_EQ(back.data(), kv.block(0).k.data());
    EXPECT_EQ(std::vector<uint8_t>(back.begin(), back.end()), bytes);
}

TEST(KvBlockStaging, DeviceBlocksPassThroughHostBuffers) {
    CountingDeviceAllocator device;
    KvCache kv(2, 64, KvType::f16, device);
    kv.grow(kv_block_tokens);
    EXPECT_EQ(device.allocations, 2);  // K and V of one block, in the device's memory
    const size_t half = kv.block_bytes() / 2;
    const std::vector<uint8_t> k_bytes = pattern(half, 1), v_bytes = pattern(half, 2);
    {
        KvBlockStaging staging;
        const std::span<uint8_t> k = staging.write(kv.writable_block(0), KvHalf::keys);
        const std::span<uint8_t> v = staging.write(kv.writable_block(0), KvHalf::values);
        EXPECT_NE(k.data(), kv.block(0).k.data());  // a host buffer, not the block
        std::memcpy(k.data(), k_bytes.data(), half);
        std::memcpy(v.data(), v_bytes.data(), half);
        EXPECT_EQ(device.uploads, 0);
        staging.commit();
        EXPECT_EQ(device.uploads, 2);
    }
    KvBlockStaging staging;
    const std::span<const uint8_t> k = staging.read(kv.block(0), KvHalf::keys);
    const std::span<const uint8_t> v = staging.read(kv.block(0), KvHalf::values);
    EXPECT_EQ(device.downloads, 2);
    EXPECT_EQ(std::vector<uint8_t>(k.begin(), k.end()), k_bytes);
    EXPECT_EQ(std::vector<uint8_t>(v.begin(), v.end()), v_bytes);

    // Copy-on-write of a shared block copies within the device's memory.
    KvCache fork = kv.fork();
    const int copies_before = device.copies;
    fork.writable_block(0);
    EXPECT_EQ(device.copies, copies_before + 2);
    const std::span<const uint8_t> forked = staging.read(fork.block(0), KvHalf::values);
    EXPECT_EQ(std::vector<uint8_t>(forked.begin(), forked.end()), v_bytes);
}

TEST(KvBlockStaging, AnUncommittedWriteOfAHalfIsRefused) {
    CountingDeviceAllocator device;
    KvCache kv(1, 32, KvType::f32, device);
    kv.grow(1);
    KvBlockStaging staging;
    staging.write(kv.writable_block(0), KvHalf::keys);
    EXPECT_THROW(staging.write(kv.writable_block(0), KvHalf::keys), Error);
    staging.commit();
    EXPECT_NO_THROW(staging.write(kv.writable_block(0), KvHalf::keys));
}

TEST(KvBlockStaging, BlocksOfAnotherMemoryAreNotAssigned) {
    CountingDeviceAllocator device;
    KvCache host(1, 32, KvType::f32);
    host.grow(kv_block_tokens);
    KvCache on_device(1, 32, KvType::f32, device);
    EXPECT_THROW(on_device.assign_blocks({host.share_block(0)}, kv_block_tokens), Error);
}

}  // namespace
}  // namespace kvstash
