// Continuous batching. One thread owns the Evaluator; each step it
//   1. drops sequences whose client went away,
//   2. admits queued jobs while sequence slots are free (prefix-cache lookup, or a named state's fork);
//      a job whose prompt starts with blocks another sequence is computing right now waits for them,
//   3. builds one batch: a chunk of each prefilling sequence's prompt (at most step_tokens prompt tokens
//      per step, so decode steps stay short) and one token for every generating sequence,
//   4. runs ONE Evaluator::eval_batch for all of them,
//   5. samples each sequence's next token (per-sequence Sampler seeded from the request) and streams
//      its text; finished sequences leave and their State is offered to the prefix cache.
// eval_batch gives every State exactly what eval() alone would, and sampling is per sequence, so a
// request's tokens do not depend on what else is being served.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kvstash/evaluator.h"
#include "kvstash/kv_type.h"
#include "kvstash/model.h"
#include "kvstash/prefix_cache.h"
#include "server/job.h"
#include "server/metrics.h"
#include "server/sequence.h"

namespace kvstash::server {

struct SchedulerOptions {
    int threads = 0;            // evaluator threads (0 = hardware threads)
    int parallel = 8;           // maximum sequences at once (a job with n choices takes n)
    int queue = 64;             // maximum jobs waiting for slots
    int64_t n_ctx = 0;          // context of new sequences (0 = the model's)
    int64_t step_tokens = 256;  // prompt tokens evaluated per step, all prefilling sequences together
    PrefixCacheOptions cache;
    // KV cache type of new sequences (a named state keeps its own).
    KvType kv_type = KvType::f16;
    // The adapter sets jobs may name (GenerationJob::adapters): each gets its own PrefixCache with
    // `cache`'s options (its keys and block files carry the model + adapters fingerprint).
    std::map<std::string, std::shared_ptr<const AdapterSet>> adapters;
    // The draft model of jobs speculating with JobSpeculation::Mode::draft (null: none; then no request can
    // ask for it).
    std::shared_ptr<const Model> draft_model;
};

class Scheduler {
public:
    Scheduler(std::shared_ptr<const Model> model, SchedulerOptions options, Metrics& metrics);
    ~Scheduler();  // stops the thread; pending and running jobs get an error event
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // False when the queue is full (the caller answers 503): `queue` jobs wait already, not counting those
    // the free sequence slots take at the next pass. The job's channel then receives nothing.
    bool submit(std::unique_ptr<GenerationJob> job);

    int64_t n_ctx() const { return n_ctx_; }
    int parallel() const { return options_.parallel; }
    PrefixCacheStats cache_stats() const { return cache_.stats(); }
    // PrefixCache::evict_disk_bytes over the model's cache, then the adapters' (one directory, each knows
    // its own files) until `bytes` are freed. Returns the bytes freed.
    uint64_t evict_cache_disk_bytes(uint64_t bytes);

private:
    void run();
    void admit(std::unique_ptr<GenerationJob> job);
    // True while a sequence being prefilled is computing whole KV blocks this job's prompt starts with: the
    // job waits in the queue and then takes them from the prefix cache instead of computing them again
    // (a burst of requests with one long system prompt computes it once).
    // `admitting`: jobs admitted earlier in the same pass.
    bool waits_for_shared_prefix(const GenerationJob& job,
                                 const std::vector<std::unique_ptr<GenerationJob>>& admitting) const;
    void drop_cancelled();
    void step();
    void after_prefill(size_t index);  // a sequence's prompt is done: hand back its state or fork the choices
    void fail(JobProgress& job, int status, const std::string& message);
    void retire_finished();
    // A new choice's drafter, by its job's JobSpeculation (none where speculation cannot be exact).
    void set_drafter(Sequence& seq) const;

    std::shared_ptr<const Model> model_;
    SchedulerOptions options_;
    Metrics& metrics_;
    int64_t n_ctx_ = 0;
    Evaluator evaluator_;
    PrefixCache cache_;
    std::map<const AdapterSet*, std::unique_ptr<PrefixCache>> adapter_caches_;  // per SchedulerOptions::adapters
    // The prefix cache of the States computed under `adapters` (null: the model alone).
    PrefixCache& cache_for(const AdapterSet* adapters);

    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::unique_ptr<GenerationJob>> queue_;  // guarded by mutex_
    bool stopping_ = false;                             // guarded by mutex_

    // Sequence slots taken by admitted jobs: raised under mutex_ (with the queue), lowered by the scheduler
    // thread alone; submit() reads it under mutex_ to tell a free slot from a wait.
    std::atomic<int> slots_used_ = 0;

    // Scheduler thread only.
    std::vector<std::unique_ptr<Sequence>> sequences_;
    std::thread thread_;
};

}  // namespace kvstash::server
