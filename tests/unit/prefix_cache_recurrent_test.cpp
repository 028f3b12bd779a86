// PrefixCache on models with recurrent layers (granitehybrid: Mamba-2 + attention; mamba2: no attention
// layers at all): a request reuses up to the last cached recurrent checkpoint its KV/token match reaches,
// the evaluation takes a checkpoint where the match ends so that the next request with that prefix reuses
// all of it (the A/B/C case of issue 13), answers are bitwise those of a cold evaluation, checkpoints
// persist on disk for another cache on the same directory, and never cross to other weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backends/cpu/runtime/dispatch.h"
#include "engine/prefix_cache_disk_checkpoint.h"
#include "engine/prefix_cache_disk_next.h"
#include "engine/prefix_cache_key.h"
#include "kvstash/chat.h"
#include "kvstash/evaluator.h"
#include "kvstash/prefix_cache.h"
#include "kvstash/sampler.h"
#include "kvstash/session.h"
#include "state/fingerprint.h"
#include "state/state_access.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kCtx = 4096;
constexpr int64_t kInterval = 256;  // StateOptions' default checkpoint interval
const StateOptions kOptions{KvType::f16, kCtx};

std::shared_ptr<const Model> recurrent_model(const std::string& name) {
    return Model::load(fixture_path("recurrent/" + name));
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// A = 3,000 tokens; B = A's first 2,000 + 1,000 others; C = the same 2,000 + 1,000 different ones. The
// three differ at position 2,000 (so B and C diverge from A, and from each other, exactly there).
struct Abc {
    std::vector<int32_t> a, b, c;
};
Abc abc_prompts(int64_t n_vocab) {
    Abc p;
    p.a = pseudo_random_tokens(3000, n_vocab, 1);
    const std::vector<int32_t> common(p.a.begin(), p.a.begin() + 2000);
    std::vector<int32_t> b_tail = pseudo_random_tokens(1000, n_vocab, 2);
    std::vector<int32_t> c_tail = pseudo_random_tokens(1000, n_vocab, 3);
    b_tail[0] = (p.a[2000] + 1) % static_cast<int32_t>(n_vocab);
    c_tail[0] = (p.a[2000] + 2) % static_cast<int32_t>(n_vocab);
    p.b = concat(common, b_tail);
    p.c = concat(common, c_tail);
    return p;
}

int32_t argmax(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Greedy continuation of `state` for `n` tokens: the tokens and every step's logits.
std::pair<std::vector<int32_t>, std::vector<float>> greedy(Evaluator& evaluator, State& state, int n) {
    std::vector<int32_t> out;
    std::vector<float> logits;
    for (int i = 0; i < n; ++i) {
        const int32_t next = argmax(state.last_logits());
        out.push_back(next);
        evaluator.eval(state, std::span(&next, 1));
        logits.insert(logits.end(), state.last_logits().begin(), state.last_logits().end());
    }
    return {out, logits};
}

struct Served {
    int64_t reused = 0;
    bool checkpoint_requested = false;
    double ttft_s = 0;  // acquire + evaluating the rest: the time to the first token's logits
};

// One request through the cache: acquire, evaluate the rest (every logits row bitwise a cold State's),
// greedy-continue 4 tokens (the same tokens and logits as the cold State's), release.
Served serve(PrefixCache& cache, Evaluator& evaluator, const std::vector<int32_t>& prompt) {
    const auto n_vocab = static_cast<size_t>(evaluator.model().n_vocab());
    State cold(evaluator.model(), kOptions);
    std::vector<float> cold_rows;
    evaluator.eval(cold, prompt, &cold_rows);

    const uint64_t requested_before = cache.stats().checkpoints_requested;
    const auto start = std::chrono::steady_clock::now();
    CachedPrefix hit = cache.acquire(prompt, kOptions);
    Served served{hit.reused_tokens, cache.stats().checkpoints_requested > requested_before};
    EXPECT_EQ(hit.state.n_tokens(), hit.reused_tokens);
    EXPECT_EQ(hit.reused_tokens + hit.tokens_to_evaluate, static_cast<int64_t>(prompt.size()));
    EXPECT_TRUE(std::equal(hit.state.tokens().begin(), hit.state.tokens().end(), prompt.begin()));
    std::vector<float> warm_rows;
    evaluator.eval(hit.state, std::span(prompt).subspan(static_cast<size_t>(hit.reused_tokens)), &warm_rows);
    served.ttft_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(warm_rows.size(), static_cast<size_t>(hit.tokens_to_evaluate) * n_vocab);
    EXPECT_EQ(0, std::memcmp(warm_rows.data(), cold_rows.data() + static_cast<size_t>(hit.reused_tokens) * n_vocab,
                             warm_rows.size() * sizeof(float)))
        << "logits after reusing " << hit.reused_tokens << " tokens differ from a cold evaluation";
    const auto [warm_tokens, warm_logits] = greedy(evaluator, hit.state, 4);
    const auto [cold_tokens, cold_logits] = greedy(evaluator, cold, 4);
    EXPECT_EQ(warm_tokens, cold_tokens);
    EXPECT_EQ(0, std::memcmp(warm_logits.data(), cold_logits.data(), warm_logits.size() * sizeof(float)));
    cache.release(hit.state);
    return served;
}

class PrefixCacheRecurrent : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        std::string name = info->name();
        std::replace(name.begin(), name.end(), '/', '_');
        dir_ = fs::temp_directory_path() / ("kvstash_recur_" + std::to_string(getpid()) + "_" + name);
        fs::remove_all(dir_);
        model_ = recurrent_model(GetParam());
        prompts_ = abc_prompts(model_->n_vocab());
    }
    void TearDown() override { fs::remove_all(dir_); }

    PrefixCacheOptions disk_options() const {
        PrefixCacheOptions o;
        o.disk_dir = dir_.string();
        return o;
    }
    size_t checkpoint_files() const {
        size_t n = 0;
        for (const auto& entry : fs::directory_iterator(dir_)) n += entry.path().extension() == ".rck" ? 1 : 0;
        return n;
    }

    fs::path dir_;
    std::shared_ptr<const Model> model_;
    Abc prompts_;
};

// The three requests: A is cold; B shares 2,000 tokens with A but A's last checkpoint before them
// is at 1,792 (every 256 tokens), so B reuses 1,792 and has a checkpoint taken at 2,000; C reuses all 2,000.
TEST_P(PrefixCacheRecurrent, AbcReusesTheDivergencePointOnTheThirdRequest) {
    Evaluator evaluator(model_, 1);
    PrefixCache cache(*model_);
    const Served a = serve(cache, evaluator, prompts_.a);
    const Served b = serve(cache, evaluator, prompts_.b);
    const Served c = serve(cache, evaluator, prompts_.c);
    for (const auto& [name, r] : {std::pair{"A", a}, std::pair{"B", b}, std::pair{"C", c}}) {
        std::printf("[%s] %s: reused %4lld of 3000 tokens%s, acquire + rest %.3f s (1 thread, all logits rows)\n",
                    GetParam().c_str(), name, static_cast<long long>(r.reused),
                    r.checkpoint_requested ? ", checkpoint requested at 2000" : "", r.ttft_s);
    }
    EXPECT_EQ(a.reused, 0);
    EXPECT_EQ(b.reused, 2000 / kInterval * kInterval);
    EXPECT_TRUE(b.checkpoint_requested);
    EXPECT_EQ(c.reused, 2000);
    EXPECT_FALSE(c.checkpoint_requested);  // C's match (2,000) ends at the cached checkpoint
    const PrefixCacheStats stats = cache.stats();
    EXPECT_GT(stats.checkpoints_held, 0u);
    EXPECT_EQ(stats.releases_rejected, 0u);

    // A again: all but its last token are cached (A's end state, at 3,000 + 4 generated tokens, lies past
    // the request), so it reuses up to its last interval checkpoint and asks for one at 2,999 (A's end
    // checkpoint's tail block holds the KV of [2,976, 3,004)); the next A reuses 2,999.
    const Served again = serve(cache, evaluator, prompts_.a);
    EXPECT_EQ(again.reused, 2999 / kInterval * kInterval);
    EXPECT_TRUE(again.checkpoint_requested);
    EXPECT_EQ(serve(cache, evaluator, prompts_.a).reused, 2999);
}

// Checkpoints are written to disk with the blocks and another cache on the directory (another process)
// reuses them; refused files (corrupt) are deleted and never used.
TEST_P(PrefixCacheRecurrent, DiskTierCarriesCheckpointsToAnotherCache) {
    Evaluator evaluator(model_, 1);
    {
        PrefixCache first(*model_, disk_options());
        serve(first, evaluator, prompts_.a);
        serve(first, evaluator, prompts_.b);
        EXPECT_GT(first.stats().disk_checkpoints_written, 0u);
    }
    EXPECT_GT(checkpoint_files(), 0u);
    {
        PrefixCache second(*model_, disk_options());
        EXPECT_EQ(serve(second, evaluator, prompts_.c).reused, 2000);
        EXPECT_GT(second.stats().disk_checkpoint_hits, 0u);
    }
    // A cache that scanned the directory before the checkpoints were written still finds, by name, the one
    // inside the block after its full-block match (2,000: disk has no partial-block matches).
    fs::remove_all(dir_);
    {
        PrefixCache early(*model_, disk_options());
        PrefixCache writer(*model_, disk_options());
        serve(writer, evaluator, prompts_.a);
        serve(writer, evaluator, prompts_.b);
        EXPECT_EQ(serve(early, evaluator, prompts_.c).reused, 2000);
        // ... and the ones at multiples of the checkpoint interval (A's at 2,560, before its divergence).
        std::vector<int32_t> r(prompts_.a.begin(), prompts_.a.begin() + 2600);
        r = concat(r, pseudo_random_tokens(100, model_->n_vocab(), 4));
        r[2600] = (prompts_.a[2600] + 1) % static_cast<int32_t>(model_->n_vocab());
        EXPECT_EQ(serve(early, evaluator, r).reused, 2560);
    }
    // Corrupt every checkpoint file: refused, deleted, and the answers stay exact.
    for (const auto& entry : fs::directory_iterator(dir_)) {
        if (entry.path().extension() != ".rck") continue;
        std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(-1, std::ios::end);
        f.put('\x5a');
    }
    PrefixCache third(*model_, disk_options());
    const Served c = serve(third, evaluator, prompts_.c);
    EXPECT_EQ(c.reused, 0);
    EXPECT_GT(third.stats().disk_rejected, 0u);
}

// Issue 13's A/B/C with each request in its own cache on one directory, as three processes: B finds, in
// the disk's list of blocks following its last full block, A's block holding the divergence, so it knows
// it leaves A at 2,000 (inside a block) and asks for a checkpoint there; C then reuses all 2,000 tokens
// (the checkpoint's file carries the KV of [1,984, 2,000)), bitwise. A truncated checkpoint file is
// refused, and a fourth request leaving A at 2,000 falls back to A's checkpoint at 1,792.
TEST_P(PrefixCacheRecurrent, AbcAcrossProcessesReusesTheDivergencePoint) {
    const auto request = [&](const std::vector<int32_t>& prompt) {
        const auto model = recurrent_model(GetParam());  // another process: another Model, another cache
        Evaluator evaluator(model, 1);
        PrefixCache cache(*model, disk_options());
        const Served served = serve(cache, evaluator, prompt);
        return std::pair{served, cache.stats()};
    };
    const auto [a, a_stats] = request(prompts_.a);
    const auto [b, b_stats] = request(prompts_.b);
    const auto [c, c_stats] = request(prompts_.c);
    EXPECT_EQ(a.reused, 0);
    EXPECT_EQ(b.reused, 2000 / kInterval * kInterval);
    EXPECT_TRUE(b.checkpoint_requested);
    EXPECT_EQ(c.reused, 2000);
    EXPECT_FALSE(c.checkpoint_requested);
    EXPECT_GT(c_stats.disk_checkpoint_hits, 0u);
    EXPECT_EQ(a_stats.disk_rejected + b_stats.disk_rejected + c_stats.disk_rejected, 0u);

    // Truncate the checkpoint at 2,000 (its key: the full blocks before it, then its 16 partial tokens).
    const PrefixKeyDomain domain(cached_model_fingerprint(*model_), KvType::f16, current_numerics());
    const std::vector<BlockKey> keys = domain.chain(prompts_.c, 2000 / kv_block_tokens);
    const BlockKey at_2000 = domain.checkpoint(keys.back(), std::span(prompts_.c).subspan(1984, 16));
    const fs::path file = dir_ / checkpoint_file_name(at_2000);
    ASSERT_TRUE(fs::exists(file));
    fs::resize_file(file, fs::file_size(file) - 1);
    std::vector<int32_t> d = concat(std::vector<int32_t>(prompts_.a.begin(), prompts_.a.begin() + 2000),
                                    pseudo_random_tokens(1000, model_->n_vocab(), 5));
    d[2000] = (prompts_.a[2000] + 3) % static_cast<int32_t>(model_->n_vocab());
    const auto [again, again_stats] = request(d);
    EXPECT_EQ(again.reused, 1792);
    EXPECT_TRUE(again.checkpoint_requested);
    EXPECT_EQ(again_stats.disk_rejected, 1u);
}

// The lists of next blocks are refused when corrupt (and rewritten by the next writer): B then cannot
// see where it leaves A inside a block, asks for a checkpoint at its last full block (1,984) instead,
// and C reuses that aligned part. Answers stay exact throughout.
TEST_P(PrefixCacheRecurrent, CorruptNextBlockListsFallBackToTheBlockBoundary) {
    const auto request = [&](const std::vector<int32_t>& prompt) {
        const auto model = recurrent_model(GetParam());
        Evaluator evaluator(model, 1);
        PrefixCache cache(*model, disk_options());
        const Served served = serve(cache, evaluator, prompt);
        return std::pair{served, cache.stats()};
    };
    request(prompts_.a);
    size_t corrupted = 0;
    for (const auto& entry : fs::directory_iterator(dir_)) {
        if (entry.path().extension() != kNextFileSuffix) continue;
        std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(-1, std::ios::end);
        f.put('\x5a');
        ++corrupted;
    }
    ASSERT_GT(corrupted, 0u);
    const auto [b, b_stats] = request(prompts_.b);
    EXPECT_EQ(b.reused, 2000 / kInterval * kInterval);
    EXPECT_TRUE(b.checkpoint_requested);
    EXPECT_GT(b_stats.disk_rejected, 0u);
    EXPECT_EQ(request(prompts_.c).first.reused, 1984);
}

// A State truncated back into its evaluated tokens has tokens waiting for re-evaluation: release()
// caches its evaluated part (before: an internal error).
TEST_P(PrefixCacheRecurrent, ReleaseOfATruncatedStateCachesItsEvaluatedPart) {
    Evaluator evaluator(model_, 1);
    PrefixCache cache(*model_);
    State state(*model_, kOptions);
    evaluator.eval(state, std::span(prompts_.a).first(700));
    state.truncate(600);  // back to the checkpoint at 512: 88 tokens pending
    ASSERT_GT(state.n_pending(), 0);
    cache.release(state);
    std::vector<int32_t> request(prompts_.a.begin(), prompts_.a.begin() + 1000);
    CachedPrefix hit = cache.acquire(request, kOptions);
    EXPECT_EQ(hit.reused_tokens, 512);
}

// Checkpoints count toward the RAM budget: the ones a live State shares stay, the others are evicted
// least recently used first (A's checkpoints every 256 tokens: the earliest go first).
TEST_P(PrefixCacheRecurrent, CheckpointsStayWithinTheBudget) {
    Evaluator evaluator(model_, 1);
    const uint64_t one = model_->info().recurrent_state_bytes;
    ASSERT_GT(one, 0u);
    uint64_t block_part = 0;
    {
        PrefixCache unbounded(*model_);
        serve(unbounded, evaluator, prompts_.a);
        const PrefixCacheStats stats = unbounded.stats();
        EXPECT_EQ(stats.checkpoints_held, 12u);  // 256, 512, ..., 2816 and the end (3,004 tokens)
        block_part = stats.bytes_held - stats.checkpoint_bytes_held;
    }
    PrefixCacheOptions options;
    options.ram_budget_bytes = block_part + 3 * one;
    PrefixCache cache(*model_, options);
    serve(cache, evaluator, prompts_.a);
    const std::vector<int32_t> unrelated = pseudo_random_tokens(40, model_->n_vocab(), 99);
    cache.acquire(unrelated, kOptions);  // evicts what the finished State no longer pins
    const PrefixCacheStats stats = cache.stats();
    EXPECT_LE(stats.bytes_held, options.ram_budget_bytes);
    EXPECT_GT(stats.evictions, 0u);
    EXPECT_GE(stats.checkpoints_held, 1u);
    EXPECT_LE(stats.checkpoints_held, 3u);
    EXPECT_EQ(stats.blocks_held, static_cast<uint64_t>(3004 / kv_block_tokens));  // no block was evicted
    // The most recent stay: a request extending A reuses up to 2,816 (A's end, at 3,004, lies past it).
    std::vector<int32_t> longer(prompts_.a.begin(), prompts_.a.begin() + 3001);
    EXPECT_EQ(cache.acquire(longer, kOptions).reused_tokens, 2816);

    // No room for checkpoints: those a live State shares stay (counted in use), then go with it.
    options.ram_budget_bytes = block_part;
    PrefixCache tight(*model_, options);
    {
        State live(*model_, kOptions);
        evaluator.eval(live, prompts_.a);
        tight.release(live);
        EXPECT_EQ(tight.stats().checkpoints_held, 12u);  // 256, ..., 2816 and the end (3,000)
        EXPECT_GE(tight.stats().bytes_in_use, tight.stats().checkpoint_bytes_held);
    }
    tight.acquire(unrelated, kOptions);
    EXPECT_EQ(tight.stats().checkpoints_held, 0u);
    EXPECT_LE(tight.stats().bytes_held, options.ram_budget_bytes);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixCacheRecurrent, ::testing::Values("granitehybrid_f32.gguf", "mamba2_f32.gguf"),
                         [](const auto& info) { return info.param.substr(0, info.param.find('_')); });

// Sessions take their system block from the cache (session.cpp): the first session's evaluation keeps a
// checkpoint where the system block ends, so the next session reuses it, and its reply is token for token
// the reply of a session without a cache.
TEST_P(PrefixCacheRecurrent, SessionsShareTheSystemBlock) {
    Evaluator evaluator(model_, 1);
    const ChatTemplate tmpl = ChatTemplate::named("chatml");
    const std::string system =
        "You are a patient tutor. You answer in one short sentence and never use lists; when you do not know "
        "something you say so plainly instead of guessing.";
    PrefixCache cache(*model_);
    SamplerParams params;
    params.temperature = 0.0f;
    GenerateOptions options;
    options.max_tokens = 8;
    Sampler sa(params), sb(params), sc(params);
    Session a(evaluator, tmpl, system, {.state = kOptions, .cache = &cache});
    ASSERT_GT(a.system_tokens(), 8);
    a.reply("Who wrote Persuasion?", sa, options);
    EXPECT_EQ(a.last_reused(), 0);
    Session b(evaluator, tmpl, system, {.state = kOptions, .cache = &cache});
    const GenerateResult rb = b.reply("What is a sonnet?", sb, options);
    EXPECT_GE(b.last_reused(), b.system_tokens()) << "the second session recomputed the system block";
    Session alone(evaluator, tmpl, system, kOptions);
    EXPECT_EQ(alone.reply("What is a sonnet?", sc, options).tokens, rb.tokens);
    EXPECT_TRUE(std::ranges::equal(alone.state().tokens(), b.state().tokens()));
    EXPECT_EQ(0, std::memcmp(alone.state().last_logits().data(), b.state().last_logits().data(),
                             b.state().last_logits().size_bytes()));
}

// A checkpoint or block made under other weights is never used: the same hybrid with one weight byte
// changed has another fingerprint, so neither the RAM tier (release refused) nor the disk tier (other keys)
// hands anything over.
TEST(PrefixCacheRecurrentWeights, OneChangedWeightByteSharesNothing) {
    const fs::path dir = fs::temp_directory_path() / ("kvstash_recur_weights_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string original = fixture_path("recurrent/granitehybrid_f32.gguf");
    const std::string changed = (dir / "granitehybrid_changed.gguf").string();
    fs::copy_file(original, changed);
    {
        std::fstream f(changed, std::ios::in | std::ios::out | std::ios::binary);
        // The high byte of an f32 inside the last tensor's data (sign and exponent bits).
        f.seekg(-997, std::ios::end);
        const int byte = f.get();
        f.seekp(-997, std::ios::end);
        f.put(static_cast<char>(byte ^ 0x01));
    }
    const auto model = Model::load(original);
    const auto other = Model::load(changed);
    ASSERT_NE(cached_model_fingerprint(*model), cached_model_fingerprint(*other));
    const Abc prompts = abc_prompts(model->n_vocab());

    PrefixCacheOptions options;
    options.disk_dir = (dir / "cache").string();
    Evaluator evaluator(model, 1), other_evaluator(other, 1);
    {
        PrefixCache cache(*model, options);
        serve(cache, evaluator, prompts.a);
        serve(cache, evaluator, prompts.a);
        EXPECT_GT(cache.stats().disk_checkpoints_written, 0u);
        // RAM: a State of the other weights is refused.
        State foreign(*other, kOptions);
        other_evaluator.eval(foreign, std::span(prompts.a).first(600));
        cache.release(foreign);
        EXPECT_EQ(cache.stats().releases_rejected, 1u);
    }
    PrefixCache other_cache(*other, options);
    const Served served = serve(other_cache, other_evaluator, prompts.a);
    EXPECT_EQ(served.reused, 0);
    EXPECT_EQ(other_cache.stats().disk_hits + other_cache.stats().disk_checkpoint_hits, 0u);
    // The changed byte matters: the two models' answers differ.
    State a(*model, kOptions), b(*other, kOptions);
    evaluator.eval(a, std::span(prompts.a).first(100));
    other_evaluator.eval(b, std::span(prompts.a).first(100));
    EXPECT_NE(0, std::memcmp(a.last_logits().data(), b.last_logits().data(), a.last_logits().size_bytes()));
    fs::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::test
