#include "server/scheduler.h"

#include <algorithm>
#include <span>

#include "kvstash/error.h"
#include "kvstash/tokenizer.h"
#include "server/api_error.h"
#include "server/speculative_step.h"
#include "state/state_access.h"

namespace kvstash::server {

Scheduler::Scheduler(std::shared_ptr<const Model> model, SchedulerOptions options, Metrics& metrics)
    : model_(model),
      options_(std::move(options)),
      metrics_(metrics),
      n_ctx_(options_.n_ctx > 0 ? options_.n_ctx : model->n_ctx_train()),
      evaluator_(model, options_.threads),
      cache_(*model, options_.cache) {
    for (const auto& [name, set] : options_.adapters) {
        if (set == nullptr || set->empty() || adapter_caches_.count(set.get())) continue;
        PrefixCacheOptions cache = options_.cache;
        cache.adapters = set;
        adapter_caches_.emplace(set.get(), std::make_unique<PrefixCache>(*model, cache));
    }
    thread_ = std::thread([this] { run(); });
}

PrefixCache& Scheduler::cache_for(const AdapterSet* adapters) {
    if (adapters == nullptr) return cache_;
    const auto it = adapter_caches_.find(adapters);
    // A set the scheduler was not given: the model's cache, which rejects its States (another fingerprint).
    return it == adapter_caches_.end() ? cache_ : *it->second;
}

uint64_t Scheduler::evict_cache_disk_bytes(uint64_t bytes) {
    uint64_t freed = cache_.evict_disk_bytes(bytes);
    for (auto& [set, cache] : adapter_caches_) {
        if (freed >= bytes) break;
        freed += cache->evict_disk_bytes(bytes - freed);
    }
    return freed;
}

Scheduler::~Scheduler() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

namespace {

int slots_needed(const GenerationJob& job) { return job.kind == GenerationJob::Kind::prefill ? 1 : job.n; }

}  // namespace

bool Scheduler::submit(std::unique_ptr<GenerationJob> job) {
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return false;
        // Jobs that the free slots take at the scheduler's next pass (first come, first served, as run()
        // admits them) are not waiting: only the others count against --queue. A burst arriving while
        // the scheduler is inside a step would otherwise find the queue full with slots free.
        int free_slots = options_.parallel - slots_used_.load();
        int waiting = 0;
        for (const auto& queued : queue_) {
            const int need = slots_needed(*queued);
            if (waiting == 0 && need <= free_slots) {
                free_slots -= need;
            } else {
                ++waiting;
            }
        }
        if (!(waiting == 0 && slots_needed(*job) <= free_slots) && waiting >= options_.queue) return false;
        queue_.push_back(std::move(job));
        metrics_.queue_depth.store(static_cast<int64_t>(queue_.size()));
    }
    wake_.notify_one();
    return true;
}

void Scheduler::run() {
    while (true) {
        std::vector<std::unique_ptr<GenerationJob>> admitted;
        {
            std::unique_lock lock(mutex_);
            if (sequences_.empty()) wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
            if (stopping_) break;
            for (auto it = queue_.begin(); it != queue_.end();) {
                const int need = slots_needed(**it);
                if (slots_used_ + need > options_.parallel) break;  // first come, first served
                if (waits_for_shared_prefix(**it, admitted)) {
                    ++it;
                    continue;
                }
                slots_used_ += need;
                admitted.push_back(std::move(*it));
                it = queue_.erase(it);
            }
            metrics_.queue_depth.store(static_cast<int64_t>(queue_.size()));
        }
        try {
            for (auto& job : admitted) admit(std::move(job));
            drop_cancelled();
            step();
            retire_finished();
        } catch (const std::exception& e) {
            // A bug or out of memory: answer everyone in flight instead of taking the process down.
            for (auto& seq : sequences_) {
                if (!seq->job->failed)
                    fail(*seq->job, 500, std::string("internal error in the scheduler: ") + e.what());
            }
            for (auto& seq : sequences_) {
                if (--seq->job->live_sequences == 0) slots_used_ -= seq->job->slots;
            }
            sequences_.clear();
            metrics_.active_sequences.store(0);
        }
    }
    // Shutting down: everyone still waiting gets an answer.
    std::deque<std::unique_ptr<GenerationJob>> pending;
    {
        std::lock_guard lock(mutex_);
        pending.swap(queue_);
    }
    for (auto& job : pending) {
        ChannelEvent event;
        event.kind = ChannelEvent::Kind::error;
        event.status = 503;
        event.message = "the server is shutting down";
        job->channel->push(std::move(event));
    }
    for (auto& seq : sequences_) {
        if (!seq->finished && !seq->job->failed) fail(*seq->job, 503, "the server is shutting down");
    }
}

void Scheduler::admit(std::unique_ptr<GenerationJob> job) {
    auto progress = std::make_shared<JobProgress>();
    progress->slots = job->kind == GenerationJob::Kind::prefill ? 1 : job->n;
    progress->live_sequences = 1;
    progress->job = std::move(job);
    GenerationJob& j = *progress->job;
    std::unique_ptr<Sequence> seq;
    int64_t reused = 0;
    try {
        if (j.base) {
            seq = std::make_unique<Sequence>(std::move(*j.base));
            j.base.reset();
            reused = seq->state.n_tokens();
        } else {
            CachedPrefix hit =
                cache_for(j.adapters.get())
                    .acquire(j.prompt,
                             StateOptions{.kv_type = options_.kv_type, .n_ctx = n_ctx_, .adapters = j.adapters});
            reused = hit.reused_tokens;
            seq = std::make_unique<Sequence>(std::move(hit.state));
            seq->prompt_done = reused;
        }
    } catch (const Error& e) {
        slots_used_ -= progress->slots;
        ChannelEvent event;
        event.kind = ChannelEvent::Kind::error;
        event.status = http_status(e.code());
        event.message = e.what();
        j.channel->push(std::move(event));
        return;
    }
    seq->job = progress;
    const int64_t to_compute = static_cast<int64_t>(j.prompt.size()) - seq->prompt_done;
    // A recurrent state cannot be cut back, so the prefix cache reuses a prefix only up to a checkpoint.
    // One just before the prompt's last token lets the same prompt again reuse all but that token (the
    // logits of the last one are needed); the state where the generation ends is cached at release, so
    // a next turn reuses the whole exchange. Kept within the State's checkpoint budget; O(1) when taken.
    if (model_->info().n_recurrent_layers > 0 && to_compute >= 2)
        StateAccess::want_checkpoint(seq->state, seq->state.n_tokens() + to_compute - 1);
    progress->usage.prompt_tokens = seq->state.n_tokens() + to_compute;
    progress->usage.cached_tokens = reused;
    metrics_.count_prompt(to_compute, reused);
    sequences_.push_back(std::move(seq));
    // Published before any event of this job is sent, so a client that saw a token sees it counted.
    int64_t active = 0;
    for (const auto& s : sequences_) active += s->finished ? 0 : 1;
    metrics_.active_sequences.store(active);
    if (!sequences_.back()->prefilling()) {
        const size_t before = sequences_.size();
        after_prefill(before - 1);
        metrics_.count_generated(static_cast<int64_t>(sequences_.size() - before));
    }
}

namespace {

// Whole 32-token KV blocks two prompts start with.
int64_t shared_block_tokens(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const size_t n = std::min(a.size(), b.size());
    const auto common =
        std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first - a.begin();
    return static_cast<int64_t>(common) / 32 * 32;
}

}  // namespace

bool Scheduler::waits_for_shared_prefix(const GenerationJob& job,
                                        const std::vector<std::unique_ptr<GenerationJob>>& admitting) const {
    if (job.base) return false;
    for (const auto& other : admitting) {  // admitted in this same pass: nothing of theirs is computed yet
        if (!other->base && other->adapters == job.adapters && shared_block_tokens(job.prompt, other->prompt) > 0)
            return true;
    }
    for (const auto& seq : sequences_) {
        if (seq->finished || !seq->prefilling() || seq->job->job->base || seq->job->job->adapters != job.adapters)
            continue;
        if (shared_block_tokens(job.prompt, seq->job->job->prompt) > seq->prompt_done) return true;
    }
    return false;
}

void Scheduler::drop_cancelled() {
    for (auto& seq : sequences_) {
        if (seq->finished || !seq->job->job->channel->cancelled()) continue;
        if (!seq->job->failed) metrics_.count_cancelled();
        seq->job->failed = true;
        seq->finished = true;
    }
}

void Scheduler::fail(JobProgress& job, int status, const std::string& message) {
    if (!job.failed) {
        ChannelEvent event;
        event.kind = ChannelEvent::Kind::error;
        event.status = status;
        event.message = message;
        job.job->channel->push(std::move(event));
    }
    job.failed = true;
    for (auto& seq : sequences_) {
        if (seq->job.get() == &job) seq->finished = true;
    }
}

void Scheduler::step() {
    // Which sequences take part, and how many of their tokens (0: not this step).
    std::vector<EvalRequest> requests;
    std::vector<size_t> members;
    std::vector<int64_t> prompt_chunk;  // per member: prompt tokens in this step (0 for a decode token)
    int64_t budget = options_.step_tokens;
    for (size_t i = 0; i < sequences_.size(); ++i) {
        Sequence& seq = *sequences_[i];
        if (seq.finished) continue;
        if (seq.prefilling()) {
            if (budget <= 0) continue;
            const auto& prompt = seq.job->job->prompt;
            const int64_t n = std::min<int64_t>(static_cast<int64_t>(prompt.size()) - seq.prompt_done, budget);
            budget -= n;
            requests.push_back(
                {&seq.state,
                 std::span<const int32_t>(prompt).subspan(static_cast<size_t>(seq.prompt_done), static_cast<size_t>(n)),
                 nullptr});
            prompt_chunk.push_back(n);
        } else if (seq.next_token) {
            prepare_decode(seq);  // next_token, and guesses with speculative decoding
            requests.push_back({&seq.state, seq.step_tokens, seq.step_tokens.size() > 1 ? &seq.step_logits : nullptr});
            prompt_chunk.push_back(0);
        } else {
            continue;
        }
        members.push_back(i);
    }
    if (requests.empty()) return;
    std::vector<bool> ok(requests.size(), true);
    try {
        evaluator_.eval_batch(requests);
    } catch (const Error&) {
        // eval_batch changed no State: find the request(s) at fault one by one; the others go on.
        for (size_t r = 0; r < requests.size(); ++r) {
            try {
                evaluator_.eval_batch(std::span<const EvalRequest>(&requests[r], 1));
            } catch (const Error& e) {
                ok[r] = false;
                fail(*sequences_[members[r]]->job, http_status(e.code()), e.what());
            }
        }
    }
    int64_t step_tokens = 0;
    for (const EvalRequest& r : requests) step_tokens += static_cast<int64_t>(r.tokens.size());
    metrics_.count_step(static_cast<int64_t>(requests.size()), step_tokens);

    const size_t count_before = sequences_.size();
    int64_t sampled = 0;
    for (size_t r = 0; r < requests.size(); ++r) {
        Sequence& seq = *sequences_[members[r]];
        if (!ok[r] || seq.finished) continue;
        if (prompt_chunk[r] > 0) {
            seq.prompt_done += prompt_chunk[r];
            if (!seq.prefilling()) {
                after_prefill(members[r]);
            } else {
                cache_for(seq.state.adapters().get())
                    .release(seq.state);  // its full blocks so far, for requests waiting on this prefix
            }
        } else {
            const DecodeCount count = finish_decode(seq);
            sampled += count.sampled;
            if (count.drafted > 0) metrics_.count_speculation(count.drafted, count.accepted);
        }
    }
    // Choices forked by after_prefill sampled their first token there.
    for (size_t i = count_before; i < sequences_.size(); ++i) ++sampled;
    metrics_.count_generated(sampled);
}

void Scheduler::after_prefill(size_t index) {
    Sequence& seq = *sequences_[index];
    JobProgress& progress = *seq.job;
    GenerationJob& job = *progress.job;
    cache_for(seq.state.adapters().get()).release(seq.state);  // the prompt's blocks, for later requests sharing it
    if (job.kind == GenerationJob::Kind::prefill) {
        progress.prefilled = std::make_shared<State>(std::move(seq.state));
        seq.state_taken = true;
        seq.finished = true;
        return;
    }
    try {
        // Choice c samples with seed + c; the last one takes the prompt state itself, the others fork it.
        for (int c = 0; c < job.n; ++c) {
            State state = c + 1 == job.n ? std::move(seq.state) : seq.state.fork();
            auto choice = std::make_unique<Sequence>(std::move(state));
            choice->job = seq.job;
            choice->choice = c;
            choice->prompt_done = static_cast<int64_t>(job.prompt.size());
            SamplerParams params = job.sampling;
            params.seed += static_cast<uint64_t>(c);
            choice->sampler.emplace(params);
            if (job.grammar)
                choice->constraint =
                    std::make_shared<GrammarConstraint>(job.grammar, job.grammar_vocabulary, job.grammar_trigger);
            choice->stream.emplace(model_->tokenizer(), job.stop, StopAtEndOfGeneration::yes);
            set_drafter(*choice);
            sample_step(*choice);
            sequences_.push_back(std::move(choice));
            ++progress.live_sequences;
        }
    } catch (const Error& e) {
        fail(progress, http_status(e.code()), e.what());
    }
    // sequences_ may have grown: look the prompt sequence up again.
    Sequence& prompt_seq = *sequences_[index];
    prompt_seq.state_taken = true;
    prompt_seq.finished = true;
}

void Scheduler::set_drafter(Sequence& seq) const {
    const JobSpeculation& spec = seq.job->job->speculation;
    if (spec.mode == JobSpeculation::Mode::none) return;
    try {
        check_speculation_supported(seq.state);
    } catch (const Error&) {
        return;  // recurrent models: plain decoding (the same answer)
    }
    if (spec.mode == JobSpeculation::Mode::lookup) {
        seq.drafter = make_lookup_drafter();
    } else {
        // Checked when the request was built: the server has a draft model.
        seq.drafter = make_model_drafter(options_.draft_model, *model_,
                                         {.n_threads = options_.threads, .p_min = spec.p_min, .n_ctx = n_ctx_});
    }
    seq.speculation = spec.options;
    seq.draft_policy = DraftLengthPolicy(spec.options, seq.drafter->costs_nothing());
}

void Scheduler::retire_finished() {
    // Published before the `done` events below: a client that got its answer sees its sequence gone.
    int64_t active = 0;
    for (const auto& seq : sequences_) active += seq->finished ? 0 : 1;
    metrics_.active_sequences.store(active);
    auto keep = std::remove_if(sequences_.begin(), sequences_.end(), [&](std::unique_ptr<Sequence>& seq) {
        if (!seq->finished) return false;
        if (!seq->state_taken) cache_for(seq->state.adapters().get()).release(seq->state);
        JobProgress& progress = *seq->job;
        if (--progress.live_sequences == 0) {
            slots_used_ -= progress.slots;
            if (!progress.failed) {
                ChannelEvent done;
                done.kind = ChannelEvent::Kind::done;
                done.usage = progress.usage;
                done.state = std::move(progress.prefilled);
                progress.job->channel->push(std::move(done));
            }
        }
        return true;
    });
    sequences_.erase(keep, sequences_.end());
}

}  // namespace kvstash::server
