// The process's default KV block allocator (kv/kv_block_allocator.h).
#include "kv/kv_block_allocator.h"

#include <atomic>

namespace kvstash {
namespace {
std::atomic<KvBlockAllocator*> chosen{nullptr};  // null: the host's
}  // namespace

KvBlockAllocator& default_kv_allocator() {
    KvBlockAllocator* a = chosen.load(std::memory_order_acquire);
    return a != nullptr ? *a : host_kv_allocator();
}

void set_default_kv_allocator(KvBlockAllocator& allocator) { chosen.store(&allocator, std::memory_order_release); }

}  // namespace kvstash
