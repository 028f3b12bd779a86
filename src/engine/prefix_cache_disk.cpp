// The disk tier: directory scan, load / store of block files, LRU trimming to the byte budget.
#include "engine/prefix_cache_disk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <tuple>
#include <vector>

#include "base/atomic_file.h"
#include "kv/kv_block_staging.h"
#include "kvstash/error.h"

namespace kvstash {
namespace fs = std::filesystem;
namespace {

// Unknown or vanished: a complete-looking file another process wrote is adopted (verified on read).
bool adopt_existing(const std::string& path, uint64_t bytes) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != bytes)
        return false;
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
    return true;
}

}  // namespace

PrefixDiskTier::PrefixDiskTier(std::string dir, uint64_t budget_bytes) : dir_(std::move(dir)), budget_(budget_bytes) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || !fs::is_directory(dir_, ec)) {
        throw Error(ErrorCode::io, "cannot use '" + dir_ + "' as the prefix cache directory" +
                                       (ec ? ": " + ec.message() : std::string()) +
                                       "; give a writable directory (it is created if missing)");
    }
    scan();
    std::vector<std::pair<BlockKey, Kind>> victims;
    {
        const std::lock_guard lock(mutex_);
        victims = take_victims();
    }
    delete_files(victims);
}

std::string PrefixDiskTier::path_of(const BlockKey& key, Kind kind) const {
    switch (kind) {
        case Kind::block: return dir_ + "/" + block_file_name(key);
        case Kind::checkpoint: return dir_ + "/" + checkpoint_file_name(key);
        case Kind::next: break;
    }
    return dir_ + "/" + next_file_name(key);
}

void PrefixDiskTier::scan() {
    std::error_code ec;
    fs::directory_iterator it(dir_, ec);
    if (ec) throw Error(ErrorCode::io, "cannot list the prefix cache directory '" + dir_ + "': " + ec.message());
    std::vector<std::tuple<fs::file_time_type, BlockKey, uint64_t, Kind>> found;
    const auto now = fs::file_time_type::clock::now();
    // Entries may vanish while we look (another process evicting): each failure skips one entry.
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        std::error_code entry_ec;
        const std::string name = it->path().filename().string();
        if (!it->is_regular_file(entry_ec) || entry_ec) continue;
        const auto mtime = it->last_write_time(entry_ec);
        if (entry_ec) continue;
        if (name.starts_with(atomic_file::kTempPrefix)) {
            if (temp_file_name::is_abandoned(name, now - mtime)) fs::remove(it->path(), entry_ec);
            continue;
        }
        Kind kind = Kind::block;
        std::optional<BlockKey> key = parse_block_file_name(name);
        if (!key && (key = parse_checkpoint_file_name(name))) kind = Kind::checkpoint;
        if (!key && (key = parse_next_file_name(name))) kind = Kind::next;
        if (!key) continue;  // not ours: left alone and not counted
        const uint64_t size = it->file_size(entry_ec);
        if (!entry_ec) found.emplace_back(mtime, *key, size, kind);
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
    const std::lock_guard lock(mutex_);
    for (const auto& [mtime, key, size, kind] : found) {
        lru_.push_back(key);  // newest first
        files_.emplace(key, File{size, kind, std::prev(lru_.end())});
        bytes_ += size;
        n_lists_ += kind == Kind::next ? 1 : 0;
    }
}

void PrefixDiskTier::note_present(const BlockKey& key, Kind kind, uint64_t bytes) {
    if (const auto it = files_.find(key); it != files_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        bytes_ = bytes_ - it->second.bytes + bytes;
        it->second.bytes = bytes;
        return;
    }
    lru_.push_front(key);
    files_.emplace(key, File{bytes, kind, lru_.begin()});
    bytes_ += bytes;
    n_lists_ += kind == Kind::next ? 1 : 0;
}

void PrefixDiskTier::forget(const BlockKey& key) {
    const auto it = files_.find(key);
    if (it == files_.end()) return;
    bytes_ -= it->second.bytes;
    n_lists_ -= it->second.kind == Kind::next ? 1 : 0;
    lru_.erase(it->second.lru);
    files_.erase(it);
}

std::vector<std::pair<BlockKey, PrefixDiskTier::Kind>> PrefixDiskTier::take_victims() {
    std::vector<std::pair<BlockKey, Kind>> victims;
    while (bytes_ > budget_ && !lru_.empty()) {
        victims.emplace_back(lru_.back(), files_.at(lru_.back()).kind);
        forget(lru_.back());
        ++evictions_;
    }
    return victims;
}

uint64_t PrefixDiskTier::evict_least_recent(uint64_t bytes) {
    std::vector<std::pair<BlockKey, Kind>> victims;
    uint64_t freed = 0;
    {
        const std::lock_guard lock(mutex_);
        while (freed < bytes && !lru_.empty()) {
            freed += files_.at(lru_.back()).bytes;
            victims.emplace_back(lru_.back(), files_.at(lru_.back()).kind);
            forget(lru_.back());
            ++evictions_;
        }
    }
    delete_files(victims);
    return freed;
}

void PrefixDiskTier::delete_files(const std::vector<std::pair<BlockKey, Kind>>& victims) {
    // A file another process already deleted is fine: it is gone either way.
    for (const auto& [key, kind] : victims) ::unlink(path_of(key, kind).c_str());
}

std::shared_ptr<KvBlock> PrefixDiskTier::load(const BlockFileName& block, const BlockFileIdentity& id,
                                              const KvCache& shape) {
    if (shape.block_bytes() != 2 * id.half_bytes()) {
        throw Error(ErrorCode::internal, "PrefixDiskTier::load: block shape and file identity disagree");
    }
    KvCache fresh = shape.fork();
    fresh.grow(kv_block_tokens);
    KvBlockStaging staging;
    uint8_t* k = staging.write(fresh.writable_block(0), KvHalf::keys).data();
    uint8_t* v = staging.write(fresh.writable_block(0), KvHalf::values).data();
    const BlockFileRead result = read_block_file(dir_, block, id, k, v);
    staging.commit();
    after_read(block.key, Kind::block, result, id.file_bytes());
    if (result != BlockFileRead::ok) return nullptr;
    return fresh.share_block(0);  // `fresh` goes: the caller holds the only reference
}

PrefixDiskTier::Checkpoint PrefixDiskTier::load_checkpoint(const CheckpointFileName& name,
                                                           const CheckpointFileIdentity& id, const KvCache& shape) {
    if (shape.block_bytes() != 2 * id.blocks.half_bytes()) {
        throw Error(ErrorCode::internal, "PrefixDiskTier::load_checkpoint: block shape and file identity disagree");
    }
    RecurrentState state(id.recurrent);
    KvCache fresh = shape.fork();
    const bool has_tail = !name.partial.empty();
    if (has_tail) fresh.grow(kv_block_tokens);
    KvBlockStaging staging;
    uint8_t* k = has_tail ? staging.write(fresh.writable_block(0), KvHalf::keys).data() : nullptr;
    uint8_t* v = has_tail ? staging.write(fresh.writable_block(0), KvHalf::values).data() : nullptr;
    const BlockFileRead result = read_checkpoint_file(dir_, name, id, state.writable_floats().data(), k, v);
    staging.commit();
    after_read(name.key, Kind::checkpoint, result, id.file_bytes(name.partial.size()));
    if (result != BlockFileRead::ok) return {};
    return Checkpoint{name.pos, std::move(state), has_tail ? fresh.share_block(0) : nullptr};
}

void PrefixDiskTier::after_read(const BlockKey& key, Kind kind, BlockFileRead result, uint64_t bytes) {
    if (result == BlockFileRead::rejected) ::unlink(path_of(key, kind).c_str());
    std::vector<std::pair<BlockKey, Kind>> victims;
    {
        const std::lock_guard lock(mutex_);
        if (result != BlockFileRead::ok) {
            forget(key);
            if (result == BlockFileRead::rejected) ++rejected_;
            return;
        }
        // A file another process wrote after our scan is now counted: trim if that takes us over.
        note_present(key, kind, bytes);
        if (kind != Kind::next) {  // a list of next blocks is a hint, not a hit
            ++(kind == Kind::checkpoint ? checkpoint_hits_ : hits_);
            bytes_read_ += bytes;
        }
        victims = take_victims();
    }
    delete_files(victims);
}

std::vector<bool> PrefixDiskTier::known_checkpoints(std::span<const BlockKey> keys) const {
    std::vector<bool> known(keys.size());
    const std::lock_guard lock(mutex_);
    for (size_t i = 0; i < keys.size(); ++i) {
        const auto it = files_.find(keys[i]);
        known[i] = it != files_.end() && it->second.kind == Kind::checkpoint;
    }
    return known;
}

bool PrefixDiskTier::mark_if_known(const BlockKey& key, Kind kind, uint64_t bytes) {
    {
        const std::lock_guard lock(mutex_);
        if (!files_.contains(key)) return false;
    }
    // Known: mark it used, in our order and in its mtime (the order other processes see).
    if (::utimensat(AT_FDCWD, path_of(key, kind).c_str(), nullptr, 0) != 0) return false;
    const std::lock_guard lock(mutex_);
    note_present(key, kind, bytes);
    return true;
}

void PrefixDiskTier::after_store(const BlockKey& key, Kind kind, bool ok, bool written, uint64_t bytes) {
    std::vector<std::pair<BlockKey, Kind>> victims;
    {
        const std::lock_guard lock(mutex_);
        if (!ok) {
            forget(key);
            ++write_errors_;
            return;
        }
        note_present(key, kind, bytes);
        if (written && kind != Kind::next) {
            ++(kind == Kind::checkpoint ? checkpoints_written_ : written_);
            bytes_written_ += bytes;
        }
        victims = take_victims();
    }
    delete_files(victims);
}

void PrefixDiskTier::store(const BlockFileName& block, const BlockFileIdentity& id, const KvBlock& kv) {
    if (mark_if_known(block.key, Kind::block, id.file_bytes())) return;
    // Adopted: whoever wrote it listed it under its parent.
    if (adopt_existing(path_of(block.key, Kind::block), id.file_bytes())) {
        after_store(block.key, Kind::block, true, false, id.file_bytes());
        return;
    }
    KvBlockStaging staging;
    const std::span<const uint8_t> k = staging.read(kv, KvHalf::keys), v = staging.read(kv, KvHalf::values);
    bool written = write_block_file(dir_, block, id, k, v);
    if (!written) {
        // Someone removed the whole directory (a user clearing the cache): make it again, once.
        std::error_code ec;
        if (fs::create_directories(dir_, ec) && !ec) written = write_block_file(dir_, block, id, k, v);
    }
    after_store(block.key, Kind::block, written, written, id.file_bytes());
    if (written) add_next_block(block, id);
}

std::vector<NextBlock> PrefixDiskTier::next_blocks(const BlockKey& parent, const BlockFileIdentity& id) {
    std::vector<NextBlock> entries;
    const NextFileRead result = read_next_file(dir_, parent, id, entries);
    const BlockKey key = next_blocks_key(parent);
    after_read(key, Kind::next,
               result == NextFileRead::ok         ? BlockFileRead::ok
               : result == NextFileRead::rejected ? BlockFileRead::rejected
                                                  : BlockFileRead::missing,
               next_file_bytes(entries.size()));
    return entries;
}

void PrefixDiskTier::add_next_block(const BlockFileName& block, const BlockFileIdentity& id) {
    // Read, add, rewrite: a list another process rewrites at the same time may lose one of the two
    // additions (a later miss). A refused list is simply replaced.
    std::vector<NextBlock> entries;
    read_next_file(dir_, block.parent, id, entries);
    for (const NextBlock& e : entries) {
        if (e.key == block.key) return;
    }
    NextBlock added{block.key, {}};
    std::copy(block.tokens.begin(), block.tokens.end(), added.tokens.begin());
    entries.insert(entries.begin(), added);
    if (entries.size() > kMaxNextBlocks) entries.resize(kMaxNextBlocks);
    const bool written = write_next_file(dir_, block.parent, id, entries);
    after_store(next_blocks_key(block.parent), Kind::next, written, written, next_file_bytes(entries.size()));
}

void PrefixDiskTier::store_checkpoint(const CheckpointFileName& name, const CheckpointFileIdentity& id,
                                      const RecurrentState& state, const KvBlock* tail) {
    const uint64_t bytes = id.file_bytes(name.partial.size());
    if (mark_if_known(name.key, Kind::checkpoint, bytes)) return;
    if (adopt_existing(path_of(name.key, Kind::checkpoint), bytes)) {
        after_store(name.key, Kind::checkpoint, true, false, bytes);
        return;
    }
    std::span<const uint8_t> k, v;
    KvBlockStaging staging;
    if (!name.partial.empty() && tail != nullptr)
        k = staging.read(*tail, KvHalf::keys), v = staging.read(*tail, KvHalf::values);
    bool written = write_checkpoint_file(dir_, name, id, state.floats(), k, v);
    if (!written) {
        std::error_code ec;
        if (fs::create_directories(dir_, ec) && !ec)
            written = write_checkpoint_file(dir_, name, id, state.floats(), k, v);
    }
    after_store(name.key, Kind::checkpoint, written, written, bytes);
}

void PrefixDiskTier::fill(PrefixCacheStats& stats) const {
    const std::lock_guard lock(mutex_);
    stats.disk_hits = hits_;
    stats.disk_checkpoint_hits = checkpoint_hits_;
    stats.disk_checkpoints_written = checkpoints_written_;
    stats.disk_blocks_written = written_;
    stats.disk_bytes_written = bytes_written_;
    stats.disk_bytes_read = bytes_read_;
    stats.disk_rejected = rejected_;
    stats.disk_evictions = evictions_;
    stats.disk_write_errors = write_errors_;
    stats.disk_blocks_held = files_.size() - n_lists_;
    stats.disk_bytes_held = bytes_;
    stats.disk_budget_bytes = budget_;
}

}  // namespace kvstash
