// An automatic prefix cache: requests that begin with tokens already evaluated reuse their KV blocks
// instead of computing them again, within a memory budget.
//
//   kvstash::PrefixCache cache(*model, {.ram_budget_bytes = 1ull << 30});
//   kvstash::CachedPrefix hit = cache.acquire(prompt);            // longest cached prefix, never all of it
//   evaluator.eval(hit.state, std::span(prompt).subspan(hit.reused_tokens));  // the rest, as if cold
//   kvstash::generate(evaluator, hit.state, sampler, options);
//   cache.release(hit.state);                                      // offer its blocks to later requests
//
// What is cached: full 32-token KV blocks, each under a content key (XXH3-128 chained over the model's
// fingerprint, the KV type, the matmul ISA and every token up to the block's end), so a key names a whole prefix. A
// lookup takes the longest run of cached full blocks, then the longest partial match inside the next
// block (a cached block whose first k tokens are the request's next k: it is shared and the State is cut
// to k tokens; copy-on-write copies it before the caller's first write).
//
// Exactness: every kernel is batch-invariant, so the logits after evaluating the rest of a request on an
// acquired State are bitwise those of evaluating the whole request on an empty State. An acquired State
// has no logits for its last position: the caller must evaluate at least one token, so acquire() never
// reuses the whole request (when all of it is cached, it keeps all but the last token).
//
// Disk tier (options.disk_dir): every full block release() offers is also written, once, to a
// content-addressed file "<key hex>.kvb" under disk_dir (write-through, atomic: temp file + rename), so
// another process (or this one, after the block left RAM) finds it by key. acquire() continues the run of
// full blocks found in RAM with blocks read back from disk, which then join the RAM tier as if released.
// Each file's header repeats the model fingerprint, KV type, ISA, shape, parent key and tokens, and a
// checksum covers the payload: a file of another model, a corrupt or a truncated one is refused
// (stats().disk_rejected) and deleted, never used. A match can end inside a block read from disk too:
// each written block is also listed under its parent ("<key hex>.kvn", a hint, verified the same way).
// Files are kept within disk_budget_bytes by deleting the least recently used (file mtime, set on use);
// several processes may share a directory (a file another process deleted is a miss, never an error).
// Disk I/O errors after construction are counted (disk_write_errors), not thrown: the cache stays exact.
//
// Recurrent models (Mamba layers: mamba, mamba2, granitehybrid): a State is KV plus a recurrent state
// that cannot be cut back, so a prefix is usable only where the cache holds a checkpoint of that state.
// release() also caches the State's checkpoints (State::checkpoint_positions()) and its state after its
// last evaluated token, each under a key chained like the blocks' (the full blocks before it, then the
// tokens of the partial block up to it; a checkpoint inside a block carries that block's KV), so they
// are exact for any request spelling the same tokens. acquire() reuses up to the last cached checkpoint
// at or before the KV/token match (a pure Mamba model has no KV: its empty blocks still chain the
// tokens); when the match runs further (the request leaves a cached sequence at D, or simply goes past
// its last checkpoint), the State is told to take a checkpoint exactly at D as the caller evaluates it,
// and release() caches it: the next request sharing those D tokens reuses all of them. Checkpoints count
// toward ram_budget_bytes and are evicted like blocks (least recently used, never while a live State
// shares them); with a disk tier they are written through as "<key hex>.rck" files next to the blocks
// and found again by key.
//
// Memory: bytes of the blocks the cache references are kept within ram_budget_bytes by evicting the least
// recently used blocks that no live State references, leaves before their parents. Blocks referenced by
// a State are never evicted, so after each acquire()/release() the cache holds at most the budget plus
// the blocks in use (stats().bytes_in_use). Thread-safe: acquire, release and stats may be called from
// several threads (each State itself is used by one thread at a time, as always).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvstash/model.h"
#include "kvstash/state.h"

namespace kvstash {

struct PrefixCacheOptions {
    uint64_t ram_budget_bytes = uint64_t{1} << 30;  // KV bytes (K + V) of cached blocks kept when unused
    // Disk tier: when non-empty, full blocks are also written to content-addressed files under this
    // directory (created if missing; the constructor throws Error(io) when it cannot) and read back on a
    // later lookup that RAM cannot answer, also by another process. Files of another model are never
    // used. Empty = RAM only.
    std::string disk_dir;
    uint64_t disk_budget_bytes = uint64_t{4} << 30;  // bytes of block and checkpoint files (all models) kept
    // The adapter set (kvstash/adapter.h) whose States this cache holds: its keys and block files carry
    // the model + adapters fingerprint. acquire() under another set finds nothing (a miss) and release()
    // of a State under another set is rejected; a shared disk_dir keeps each set's blocks apart. Null =
    // the model alone (the fingerprint of a cache made before adapters existed).
    std::shared_ptr<const AdapterSet> adapters = nullptr;
    // Redis tier, under RAM and disk (docs/deploy.md): when non-empty, a URL
    // redis://[user:password@]host:port[/db] (the constructor throws Error(invalid_argument) on a bad one,
    // never because Redis is down). Full blocks release() offers are written behind (a background
    // thread, at most redis_queue_bytes of blocks waiting; more are dropped and counted) as values under
    // "kvstash:blk:v1:<key hex>" holding a block file's bytes, verified on read like a file (another
    // model's, a corrupt or a truncated value is refused, deleted and recomputed). Read by acquire() after
    // RAM and disk; blocks found join RAM (and the disk tier). Every command waits at most the timeouts;
    // when Redis is down or slow the tier backs off (no command is tried for 100 ms to 5 s) and lookups go
    // on without it. Eviction is Redis's own (maxmemory + allkeys-lru); writes it refuses are counted.
    // Recurrent checkpoints and partial-block matches stay in RAM and on disk.
    std::string redis_url;
    int redis_connect_timeout_ms = 100;
    int redis_io_timeout_ms = 500;
    uint64_t redis_queue_bytes = uint64_t{256} << 20;
};

// Counters since construction; the byte figures are current.
struct PrefixCacheStats {
    uint64_t lookups = 0;             // acquire() calls with at least one token
    uint64_t hits = 0;                // lookups that reused at least one token
    uint64_t misses = 0;              // lookups that reused nothing
    uint64_t partial_block_hits = 0;  // hits that ended inside a cached block (shared, then cut)
    uint64_t tokens_reused = 0;       // tokens acquire() handed back with their KV
    uint64_t tokens_computed = 0;     // tokens acquire() left to the caller to evaluate (request - reused)
    uint64_t blocks_inserted = 0;     // new blocks release() added to the index
    uint64_t evictions = 0;           // blocks and checkpoints dropped to stay within the budget
    uint64_t releases_rejected = 0;   // release() of a State of another model or with lossy (q8_0-loaded) KV
    uint64_t blocks_held = 0;         // blocks in the index now
    uint64_t bytes_held = 0;          // their K + V bytes, and the checkpoints' (both count toward the budget)
    uint64_t bytes_in_use = 0;        // of those, bytes the cache cannot evict now: blocks and checkpoints a live
                                      // State references, and their ancestors
    uint64_t ram_budget_bytes = 0;
    // Models with recurrent layers (all zero otherwise).
    uint64_t checkpoints_inserted = 0;   // new recurrent checkpoints release() added to the index
    uint64_t checkpoints_requested = 0;  // lookups that asked the evaluation for a checkpoint where the
                                         // cached prefix runs past the last cached checkpoint
    uint64_t checkpoints_held = 0;       // checkpoints in the index now
    uint64_t checkpoint_bytes_held = 0;  // their bytes (recurrent state + tail block), part of bytes_held
    // Disk tier (all zero without one).
    uint64_t disk_hits = 0;                 // blocks a lookup found on disk (not in RAM) and read back
    uint64_t disk_checkpoint_hits = 0;      // checkpoints a lookup read back from disk
    uint64_t disk_checkpoints_written = 0;  // checkpoint files this cache wrote (bytes in disk_bytes_written)
    uint64_t disk_misses = 0;               // lookups that also looked on disk and found no further block
    uint64_t disk_blocks_written = 0;       // block files this cache wrote
    uint64_t disk_bytes_written = 0;        // their bytes (header + K + V)
    uint64_t disk_bytes_read = 0;           // bytes of the files read back (disk_hits + disk_checkpoint_hits)
    uint64_t disk_rejected = 0;      // block or checkpoint files refused and deleted (other model, corrupt, truncated)
    uint64_t disk_evictions = 0;     // files (blocks, checkpoints, next-block lists) deleted to stay within budget
    uint64_t disk_write_errors = 0;  // block files that could not be written (disk full, permissions)
    uint64_t disk_blocks_held = 0;   // block and checkpoint files under disk_dir now, as far as this process knows
    uint64_t disk_bytes_held = 0;    // their bytes and those of the next-block lists (the budget covers all)
    uint64_t disk_budget_bytes = 0;
    // Redis tier (all zero without one).
    uint64_t redis_hits = 0;            // blocks a lookup found in Redis (not in RAM or on disk) and used
    uint64_t redis_misses = 0;          // lookups that asked Redis and found no further block
    uint64_t redis_errors = 0;          // commands that failed or were skipped (down, timeout, backing off)
    uint64_t redis_rejected = 0;        // values refused (other model, corrupt, truncated) and deleted
    uint64_t redis_write_refused = 0;   // writes Redis answered with an error (OOM: maxmemory without eviction)
    uint64_t redis_writes_dropped = 0;  // blocks not written: the write-behind queue was full, or Redis down
    uint64_t redis_blocks_written = 0;  // values this cache wrote
    uint64_t redis_bytes_written = 0;   // their bytes
    uint64_t redis_bytes_read = 0;      // bytes of the values used (redis_hits)
    uint64_t redis_connected = 0;       // 1 when the last command succeeded
};

// What acquire() hands back.
struct CachedPrefix {
    State state;                     // tokens[0, reused_tokens) and their KV; no logits
    int64_t reused_tokens = 0;       // == state.n_tokens()
    int64_t tokens_to_evaluate = 0;  // the request's tokens past the prefix: evaluate them before sampling
    bool partial_block = false;      // the prefix ends inside a shared cached block
};

class PrefixCache {
public:
    // `model` must outlive the cache and the States it hands out (as for any State).
    explicit PrefixCache(const Model& model, PrefixCacheOptions options = {});
    ~PrefixCache();
    PrefixCache(const PrefixCache&) = delete;
    PrefixCache& operator=(const PrefixCache&) = delete;

    // A new State of this model (with `options`' KV type and context) holding the longest cached prefix
    // of `tokens`, at most tokens.size() - 1 tokens and at most the context; possibly empty. Blocks of
    // another KV type never match. Counts the lookup in stats(). Recurrent models: the prefix ends at a
    // cached checkpoint, and the State may want one further on (see above; evaluating the rest takes it).
    CachedPrefix acquire(std::span<const int32_t> tokens, StateOptions options = {});

    // Offers `state`'s full blocks (its first n_tokens() / 32 * 32 tokens) to the cache, and with
    // recurrent layers its checkpoints (tokens waiting for re-evaluation after a truncate() are left out). Call it when
    // a sequence finishes, or at any time: the State is not changed and may go on (its blocks are now shared, so it
    // copies one before writing into it). Blocks already cached are only marked recently used. A State of another model
    // (by fingerprint: the same file loaded twice is the same model) or whose KV was loaded from a lossy q8_0 state
    // file is not inserted (stats().releases_rejected). With a disk tier, blocks without a file are written before it
    // returns (so they outlive this process); the others have their file marked recently used.
    void release(const State& state);

    PrefixCacheStats stats() const;

    // Deletes the disk tier's least recently used block files until `bytes` are freed (0 without a disk
    // tier): room on a full filesystem for something else (kvstash serve's named states). Returns the bytes
    // freed; the blocks stay cached in RAM while they are there.
    uint64_t evict_disk_bytes(uint64_t bytes);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash
