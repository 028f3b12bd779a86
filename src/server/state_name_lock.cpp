#include "server/state_name_lock.h"

namespace kvstash::server {

StateNameLocks::Guard::Guard(StateNameLocks& locks, const std::string& name) : locks_(locks) {
    {
        std::lock_guard lock(locks_.mutex_);
        slot_ = locks_.slots_.try_emplace(name, std::make_unique<Slot>()).first;
        ++slot_->second->users;
    }
    slot_->second->mutex.lock();  // map iterators stay valid while users > 0 keeps the entry
}

StateNameLocks::Guard::~Guard() {
    slot_->second->mutex.unlock();
    std::lock_guard lock(locks_.mutex_);
    if (--slot_->second->users == 0) locks_.slots_.erase(slot_);
}

}  // namespace kvstash::server
