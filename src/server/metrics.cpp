#include "server/metrics.h"

#include <sstream>

#include "kvstash/grammar.h"
#include "server/redis_metrics.h"

namespace kvstash::server {

void Metrics::count_request(const std::string& route, int status) {
    std::lock_guard lock(mutex_);
    ++requests_[{route, status}];
}

void Metrics::count_prompt(int64_t computed, int64_t reused) {
    prompt_computed_.fetch_add(static_cast<uint64_t>(computed));
    prompt_reused_.fetch_add(static_cast<uint64_t>(reused));
}

void Metrics::count_generated(int64_t tokens) {
    if (tokens <= 0) return;
    generated_.fetch_add(static_cast<uint64_t>(tokens));
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    recent_.emplace_back(now, tokens);
    while (!recent_.empty() && now - recent_.front().first > window_) recent_.pop_front();
}

void Metrics::count_step(int64_t sequences, int64_t tokens) {
    steps_.fetch_add(1);
    step_sequences_.fetch_add(static_cast<uint64_t>(sequences));
    step_tokens_.fetch_add(static_cast<uint64_t>(tokens));
}

double Metrics::decode_tokens_per_second() const {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    int64_t tokens = 0;
    for (const auto& [time, count] : recent_) {
        if (now - time <= window_) tokens += count;
    }
    return static_cast<double>(tokens) / static_cast<double>(window_.count());
}

std::string Metrics::render(const PrefixCacheStats& cache, const StateStoreTotals& states) const {
    std::ostringstream out;
    auto metric = [&out](const char* name, const char* type, const char* help, auto value) {
        out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
            << name << ' ' << value << '\n';
    };
    out << "# HELP kvstash_requests_total HTTP requests answered, by route and status.\n"
           "# TYPE kvstash_requests_total counter\n";
    {
        std::lock_guard lock(mutex_);
        for (const auto& [key, count] : requests_) {
            out << "kvstash_requests_total{route=\"" << key.first << "\",status=\"" << key.second << "\"} " << count
                << '\n';
        }
    }
    const uint64_t computed = prompt_computed_.load(), reused = prompt_reused_.load();
    metric("kvstash_prompt_tokens_computed_total", "counter", "Prompt tokens evaluated.", computed);
    metric("kvstash_prompt_tokens_reused_total", "counter",
           "Prompt tokens taken from the prefix cache or a named state.", reused);
    metric("kvstash_prompt_cache_hit_ratio", "gauge", "Reused / (reused + computed) prompt tokens since start.",
           computed + reused == 0 ? 0.0 : static_cast<double>(reused) / static_cast<double>(computed + reused));
    metric("kvstash_generated_tokens_total", "counter", "Tokens sampled, all choices.", generated_.load());
    metric("kvstash_decode_tokens_per_second", "gauge", "Tokens sampled per second over the last 10 s.",
           decode_tokens_per_second());
    metric("kvstash_batch_steps_total", "counter", "Batched evaluation steps (one eval_batch call each).",
           steps_.load());
    metric("kvstash_batch_sequences_total", "counter", "Sequences evaluated, summed over steps (/ steps = mean batch).",
           step_sequences_.load());
    metric("kvstash_batch_tokens_total", "counter",
           "Tokens evaluated in batched steps (prompt chunks and decode tokens).", step_tokens_.load());
    metric("kvstash_speculative_drafted_tokens_total", "counter",
           "Draft tokens verified by speculative decoding (docs/speculative.md).", drafted_.load());
    metric("kvstash_speculative_accepted_tokens_total", "counter",
           "Draft tokens kept: each equal to the token sampled there (accepted / drafted = acceptance rate).",
           accepted_.load());
    metric("kvstash_requests_cancelled_total", "counter", "Requests cancelled because the client went away.",
           cancelled_.load());
    metric("kvstash_queue_depth", "gauge", "Requests waiting for a sequence slot.", queue_depth.load());
    metric("kvstash_active_sequences", "gauge", "Sequences being evaluated or generated.", active_sequences.load());
    metric("kvstash_prefix_cache_lookups_total", "counter", "Prefix cache lookups.", cache.lookups);
    metric("kvstash_prefix_cache_hits_total", "counter", "Prefix cache lookups that reused tokens.", cache.hits);
    metric("kvstash_prefix_cache_evictions_total", "counter", "Blocks evicted from RAM.", cache.evictions);
    out << "# HELP kvstash_cache_bytes Bytes held per tier (ram: cached KV blocks; ram_in_use: of those, referenced by "
           "live "
           "states; disk: block files).\n# TYPE kvstash_cache_bytes gauge\n"
        << "kvstash_cache_bytes{tier=\"ram\"} " << cache.bytes_held << '\n'
        << "kvstash_cache_bytes{tier=\"ram_in_use\"} " << cache.bytes_in_use << '\n'
        << "kvstash_cache_bytes{tier=\"disk\"} " << cache.disk_bytes_held << '\n';
    out << "# HELP kvstash_cache_budget_bytes Budget per tier.\n# TYPE kvstash_cache_budget_bytes gauge\n"
        << "kvstash_cache_budget_bytes{tier=\"ram\"} " << cache.ram_budget_bytes << '\n'
        << "kvstash_cache_budget_bytes{tier=\"disk\"} " << cache.disk_budget_bytes << '\n';
    metric("kvstash_cache_disk_hits_total", "counter", "Blocks read back from the disk tier.", cache.disk_hits);
    write_redis_cache_metrics(out, cache);  // all zero without a Redis tier
    metric("kvstash_named_states", "gauge", "Named states (POST /v1/states, uploads).", states.states);
    metric("kvstash_named_states_bytes", "gauge", "KV bytes of named states held in memory.", states.bytes_in_memory);
    const GrammarMaskCacheStats masks = grammar_mask_cache_stats();
    metric("kvstash_grammar_mask_cache_bytes", "gauge", "Bytes of token masks shared between constrained requests.",
           masks.bytes);
    metric("kvstash_grammar_mask_cache_entries", "gauge", "Token masks shared between constrained requests.",
           masks.entries);
    return out.str();
}

}  // namespace kvstash::server
