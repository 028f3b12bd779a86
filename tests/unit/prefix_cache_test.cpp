// PrefixCache: what acquire() reuses (full blocks, then a partial match inside the next block), that
// evaluating the rest gives bitwise the logits of a cold State, that divergent requests share their
// common blocks, that eviction keeps the budget, follows LRU order, takes leaves first and never drops
// a block a State still uses, that another KV type or model never shares, and the counters.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <thread>

#include "engine/prefix_cache_key.h"
#include "kvstash/prefix_cache.h"
#include "state/state_access.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

PrefixCacheOptions ram_only(uint64_t budget) {
    PrefixCacheOptions options;
    options.ram_budget_bytes = budget;
    return options;
}

constexpr int64_t B = kv_block_tokens;

std::shared_ptr<const Model> tiny(const char* name = "gqa_f32.gguf") {
    return Model::load(fixture_path(std::string("tiny/") + name));
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

std::vector<int32_t> head(const std::vector<int32_t>& tokens, int64_t n) {
    return {tokens.begin(), tokens.begin() + n};
}

// A State that evaluated `tokens` from empty.
State evaluated(Evaluator& evaluator, const std::vector<int32_t>& tokens, KvType kv_type = KvType::f16) {
    State state(evaluator.model(), StateOptions{kv_type, 0});
    evaluator.eval(state, tokens);
    return state;
}

// Evaluates the rest of `tokens` on hit.state and expects every new logits row to be bitwise the row a
// cold State computes for the whole of `tokens`.
void finish_and_expect_cold(Evaluator& evaluator, CachedPrefix& hit, const std::vector<int32_t>& tokens,
                            KvType kv_type = KvType::f16) {
    const auto n_vocab = static_cast<size_t>(evaluator.model().n_vocab());
    std::vector<float> cold;
    State cold_state(evaluator.model(), StateOptions{kv_type, 0});
    evaluator.eval(cold_state, tokens, &cold);
    ASSERT_EQ(hit.reused_tokens + hit.tokens_to_evaluate, static_cast<int64_t>(tokens.size()));
    ASSERT_GE(hit.tokens_to_evaluate, 1);
    ASSERT_TRUE(std::equal(hit.state.tokens().begin(), hit.state.tokens().end(), tokens.begin()));
    std::vector<float> warm;
    evaluator.eval(hit.state, std::span(tokens).subspan(static_cast<size_t>(hit.reused_tokens)), &warm);
    ASSERT_EQ(warm.size(), static_cast<size_t>(hit.tokens_to_evaluate) * n_vocab);
    EXPECT_EQ(0, std::memcmp(warm.data(), cold.data() + static_cast<size_t>(hit.reused_tokens) * n_vocab,
                             warm.size() * sizeof(float)))
        << "logits after reusing " << hit.reused_tokens << " cached tokens differ from a cold evaluation";
}

uint64_t block_bytes(const Model& model, KvType kv_type = KvType::f16) {
    return StateAccess::kv(State(model, StateOptions{kv_type, 0})).block_bytes();
}

void miss_then_hit(const std::shared_ptr<const Model>& model, int64_t n_tokens) {
    Evaluator evaluator(model, 1);
    PrefixCache cache(*model);
    const auto tokens = pseudo_random_tokens(n_tokens, std::min<int64_t>(model->n_vocab(), 300), 11);

    CachedPrefix cold = cache.acquire(tokens);
    EXPECT_EQ(cold.reused_tokens, 0);
    EXPECT_EQ(cold.state.n_tokens(), 0);
    finish_and_expect_cold(evaluator, cold, tokens);
    cache.release(cold.state);

    CachedPrefix hit = cache.acquire(tokens);  // all cached: everything but the last token
    EXPECT_EQ(hit.reused_tokens, n_tokens - 1);
    EXPECT_EQ(hit.tokens_to_evaluate, 1);
    EXPECT_TRUE(hit.partial_block);
    EXPECT_TRUE(hit.state.last_logits().empty());
    finish_and_expect_cold(evaluator, hit, tokens);

    const auto longer = concat(tokens, pseudo_random_tokens(9, 300, 12));
    CachedPrefix more = cache.acquire(longer);  // every full block, nothing partial
    EXPECT_EQ(more.reused_tokens, n_tokens);
    EXPECT_FALSE(more.partial_block);
    finish_and_expect_cold(evaluator, more, longer);
}

TEST(PrefixCache, MissThenHitIsBitwiseColdOnTinyModels) {
    miss_then_hit(tiny("gqa_f32.gguf"), 3 * B);
    miss_then_hit(tiny("q_q4_1.gguf"), 2 * B);
}

TEST(PrefixCache, MissThenHitIsBitwiseColdOnTheDefaultModel) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    miss_then_hit(Model::load(default_model_path()), 2 * B);
}

TEST(PrefixCache, PartialBlockReuseLeavesTheCachedBlockIntact) {
    auto model = tiny();
    Evaluator evaluator(model, 1);
    PrefixCache cache(*model);
    const auto cached = pseudo_random_tokens(70, 300, 21);
    cache.release(evaluated(evaluator, cached));

    auto request = concat(head(cached, 45), pseudo_random_tokens(25, 300, 22));
    request[45] = (cached[45] + 1) % 300;
    CachedPrefix hit = cache.acquire(request);
    EXPECT_EQ(hit.reused_tokens, 45);  // block 0 whole, then 13 tokens of block 1
    EXPECT_TRUE(hit.partial_block);
    finish_and_expect_cold(evaluator, hit, request);  // writes positions 45.. of its copy of block 1

    // Block 1 as cached still holds the original sequence's KV (copy-on-write kept it apart).
    CachedPrefix again = cache.acquire(cached);
    EXPECT_EQ(again.reused_tokens, 2 * B);
    finish_and_expect_cold(evaluator, again, cached);
    // A request diverging inside the first block reuses the shared start of it.
    auto early = concat(head(cached, 20), pseudo_random_tokens(5, 300, 23));
    early[20] = (cached[20] + 1) % 300;
    CachedPrefix first = cache.acquire(early);
    EXPECT_EQ(first.reused_tokens, 20);
    finish_and_expect_cold(evaluator, first, early);
}

TEST(PrefixCache, DivergentRequestsShareTheirCommonBlocks) {
    auto model = tiny();
    Evaluator evaluator(model, 1);
    PrefixCache cache(*model);
    const auto common = pseudo_random_tokens(2 * B, 300, 31);
    auto x = pseudo_random_tokens(2 * B, 300, 32), y = pseudo_random_tokens(2 * B, 300, 33);
    y[0] = (x[0] + 1) % 300;
    const auto a = concat(common, x), b = concat(common, y);

    cache.release(evaluated(evaluator, a));
    EXPECT_EQ(cache.stats().blocks_held, 4u);
    CachedPrefix hit = cache.acquire(b);
    EXPECT_EQ(hit.reused_tokens, 2 * B);
    finish_and_expect_cold(evaluator, hit, b);
    cache.release(hit.state);
    const PrefixCacheStats s = cache.stats();
    EXPECT_EQ(s.blocks_held, 6u);  // 2 common + 2 + 2, not 8
    EXPECT_EQ(s.bytes_held, 6 * block_bytes(*model));
    EXPECT_EQ(s.blocks_inserted, 6u);
    // Releasing the same content again adds nothing.
    cache.release(evaluated(evaluator, b));
    EXPECT_EQ(cache.stats().blocks_held, 6u);
}

TEST(PrefixCache, EvictionNeverDropsBlocksInUseAndKeepsTheBudget) {
    auto model = tiny();
    Evaluator evaluator(model, 1);
    const uint64_t bb = block_bytes(*model);
    PrefixCache cache(*model, ram_only(2 * bb));
    const auto held_tokens = pseudo_random_tokens(3 * B, 300, 41);
    State held = evaluated(evaluator, held_tokens);
    cache.release(held);  // 3 blocks over a 2-block budget, but all in use by `held`
    EXPECT_EQ(cache.stats().blocks_held, 3u);
    EXPECT_EQ(cache.stats().evictions, 0u);

    for (uint64_t seed = 0; seed < 6; ++seed) {  // pressure: 12 more blocks, each State dropped at once
        cache.release(evaluated(evaluator, pseudo_random_tokens(2 * B, 300, 100 + seed)));
        const PrefixCacheStats s = cache.stats();
        EXPECT_LE(s.bytes_held, s.ram_budget_bytes + s.bytes_in_use) << "after release " << seed;
    }
    const PrefixCacheStats s = cache.stats();
    EXPECT_EQ(s.bytes_in_use, 3 * bb);
    EXPECT_GE(s.evictions, 10u);

    // The held State's blocks are all still cached (they are the least recently used, yet pinned) ...
    const auto extended = concat(held_tokens, pseudo_random_tokens(10, 300, 42));
    CachedPrefix hit = cache.acquire(extended);
    EXPECT_EQ(hit.reused_tokens, 3 * B);
    finish_and_expect_cold(evaluator, hit, extended);
    // ... and the held State itself continues exactly.
    CachedPrefix as_held{std::move(held), 3 * B, 10, false};
    finish_and_expect_cold(evaluator, as_held, extended);

    // Once no State uses them, the next call brings the cache back within its budget.
    as_held = CachedPrefix{State(*model)};
    hit = CachedPrefix{State(*model)};
    cache.acquire(pseudo_random_tokens(5, 300, 43));
    EXPECT_LE(cache.stats().bytes_held, 2 * bb);
    EXPECT_EQ(cache.stats().bytes_in_use, 0u);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedFirst) {
    auto model = tiny();
    Evaluator evaluator(model, 1);
    PrefixCache cache(*model, ram_only(3 * block_bytes(*model)));
    std::vector<std::vector<int32_t>> seqs;
    for (uint64_t seed = 0; seed < 4; ++seed)
        seqs.push_back(pseudo_random_tokens(B, 300, 50 + seed));  // one block each
    for (int i = 0; i < 3; ++i) cache.release(evaluated(evaluator, seqs[static_cast<size_t>(i)]));
    EXPECT_EQ(cache.acquire(seqs[0]).reused_tokens, B - 1);  // A is now more recent than B
    cache.release(evaluated(evaluator, seqs[3]));            // D in: one block must go, and it is B
    EXPECT_EQ(cache.stats().evictions, 1u);
    EXPECT_EQ(cache.acquire(seqs[1]).reused_tokens, 0);
    EXPECT_EQ(cache.acquire(seqs[0]).reused_tokens, B - 1);
    EXPECT_EQ(cache.acquire(seqs[2]).reused_tokens, B - 1);
    EXPECT_EQ(cache.acquire(seqs[3]).reused_tokens, B - 1);
}

TEST(PrefixCache, EvictsLeavesBeforeTheirParents) {
    auto model = tiny();
    Evaluator evaluator(model, 1);
    PrefixCache cache(*model, ram_only(2 * block_bytes(*model)));
    const auto chain = pseudo_random_tokens(3 * B, 300, 61);
    cache.release(evaluated(evaluator, chain));  // in use while released: nothing evicted yet
    EXPECT_EQ(cache.stats().blocks_held, 3u);
    cache.acquire(pseudo_random_tokens(3, 300, 62));  // the State is gone: the oldest leaf goes
    EXPECT_EQ(cache.stats().evictions, 1u);
    // Block 0 was used first (least recently), but evicting it would strand blocks 1 and 2.
    EXPECT_EQ(cache.acquire(chain).reused_tokens, 2 * B);
}

TEST(PrefixCache, AnotherKvTypeNeverShares) {
    auto model = tiny();
    Evaluator evaluator(model, 1);
    PrefixCache cache(*model);
    const auto tokens = pseudo_random_tokens(2 * B, 300, 71);
    cache.release(evaluated(evaluator, tokens, KvType::f16));
    EXPECT_EQ(cache.acquire(tokens, StateOptions{KvType::f32, 0}).reused_tokens, 0);
    cache.release(evaluated(evaluator, tokens, KvType::f32));
    EXPECT_EQ(cache.stats().blocks_held, 4u);  // two trees, one per KV type
    CachedPrefix f32 = cache.acquire(tokens, StateOptions{KvType::f32, 0});
    EXPECT_EQ(f32.reused_tokens, 2 * B - 1);
    EXPECT_EQ(f32.state.kv_type(), KvType::f32);
    finish_and_expect_cold(evaluator, f32, tokens, KvType::f32);
    CachedPrefix f16 = cache.acquire(tokens);
    EXPECT_EQ(f16.state.kv_type(), KvType::f16);
    finish_and_expect_cold(evaluator, f16, tokens, KvType::f16);
}

TEST(PrefixCache, AnotherModelNeverSharesButTheSameFileLoadedTwiceDoes) {
    auto model = tiny("gqa_f32.gguf");
    Evaluator evaluator(model, 1);
    PrefixCache cache(*model);
    const auto tokens = pseudo_random_tokens(2 * B, 300, 81);

    auto other = tiny("q_q4_1.gguf");
    Evaluator other_evaluator(other, 1);
    cache.release(evaluated(other_evaluator, tokens));
    EXPECT_EQ(cache.stats().releases_rejected, 1u);
    EXPECT_EQ(cache.stats().blocks_held, 0u);

    auto reloaded = tiny("gqa_f32.gguf");  // another Model object, the same fingerprint
    Evaluator reloaded_evaluator(reloaded, 1);
    cache.release(evaluated(reloaded_evaluator, tokens));
    EXPECT_EQ(cache.stats().blocks_held, 2u);
    CachedPrefix hit = cache.acquire(tokens);
    EXPECT_EQ(hit.reused_tokens, 2 * B - 1);
    finish_and_expect_cold(evaluator, hit, tokens);
}

TEST(PrefixCache, KeysNameTheWholePrefixTheModelKvTypeAndIsa) {
    ModelFingerprint fp, fp2;
    fp2.bytes[15] = 1;
    const PrefixKeyDomain d(fp, KvType::f16, numerics_of(Isa::scalar));
    const auto tokens = pseudo_random_tokens(2 * B, 300, 91);
    auto changed = tokens;
    changed[5] ^= 1;
    const auto keys = d.chain(tokens, 2);
    EXPECT_EQ(keys, PrefixKeyDomain(fp, KvType::f16, numerics_of(Isa::scalar)).chain(tokens, 2));  // deterministic
    EXPECT_NE(keys[1], d.chain(changed, 2)[1]);  // block 1's key depends on block 0's tokens
    EXPECT_NE(keys[0], keys[1]);
    for (const PrefixKeyDomain& other :
         {PrefixKeyDomain(fp2, KvType::f16, numerics_of(Isa::scalar)),
          PrefixKeyDomain(fp, KvType::f32, numerics_of(Isa::scalar)),
          PrefixKeyDomain(fp, KvType::f16, Numerics{kNumericsEpoch, cuda_numerics_path(90)}),
          PrefixKeyDomain(fp, KvType::f16, Numerics{kNumericsEpoch + 1, NumericsPath::scalar})}) {
        EXPECT_NE(other.root(), d.root());
        EXPECT_NE(other.chain(tokens, 2)[0], keys[0]);
        EXPECT_NE(other.chain(tokens, 2)[1], keys[1]);
    }
    EXPECT_EQ(keys[0].hex().size(), 32u);
}

// The root key's bytes as prefix_cache_key.h lays them out, hashed here directly: the identity in the key
// is the numerics (path code, epoch), and a change of this layout changes every key (a disk or Redis tier
// then misses everything it holds).
TEST(PrefixCache, RootKeyIsTheDocumentedLayout) {
    ModelFingerprint fp;
    for (size_t i = 0; i < fp.bytes.size(); ++i) fp.bytes[i] = static_cast<uint8_t>(i * 7 + 1);
    const Numerics numerics{2, NumericsPath::avx512_vnni};
    std::string bytes = "kvstash.prefix.v1";
    bytes.append(reinterpret_cast<const char*>(fp.bytes.data()), 16);
    for (uint32_t field : {0u /* f16 */, 4u /* avx512_vnni */, 2u /* epoch */}) {
        for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>(field >> (8 * b) & 0xff));
    }
    const XXH128_hash_t expected = XXH3_128bits(bytes.data(), bytes.size());
    const BlockKey root = PrefixKeyDomain(fp, KvType::f16, numerics).root();
    EXPECT_EQ(root, (BlockKey{expected.high64, expected.low64}));
}

TEST(PrefixCache, LossyKvIsNotCached) {
    auto model = tiny();
    Evaluator evaluator(model, 1);
    PrefixCache cache(*model);
    State state = evaluated(evaluator, pseudo_random_tokens(2 * B, 300, 95));
    StateAccess::set_kv_exact(state, false);  // as a State decoded from a q8_0 state file
    cache.release(state.fork());              // forks inherit it
    EXPECT_EQ(cache.stats().releases_rejected, 1u);
    EXPECT_EQ(cache.stats().blocks_held, 0u);
}

TEST(PrefixCache, StatsCountLookupsTokensAndBlocks) {
    auto model = tiny();
    Evaluator evaluator(model, 1);
    PrefixCache cache(*model, ram_only(12345));
    const auto tokens = pseudo_random_tokens(70, 300, 97);
    EXPECT_EQ(cache.acquire({}).reused_tokens, 0);  // empty: not a lookup
    CachedPrefix miss = cache.acquire(tokens);
    evaluator.eval(miss.state, tokens);
    cache.release(miss.state);
    CachedPrefix full = cache.acquire(concat(head(tokens, 64), {1}));            // 2 full blocks
    CachedPrefix partial = cache.acquire(head(tokens, 40));                      // 1 full block + 7
    CachedPrefix capped = cache.acquire(tokens, StateOptions{KvType::f16, 20});  // the context allows 20
    EXPECT_EQ(capped.reused_tokens, 20);

    const PrefixCacheStats s = cache.stats();
    EXPECT_EQ(s.lookups, 4u);
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(s.hits, 3u);
    EXPECT_EQ(s.partial_block_hits, 2u);
    EXPECT_EQ(s.tokens_reused, 64u + 39u + 20u);
    EXPECT_EQ(s.tokens_computed, 70u + 1u + 1u + 50u);
    EXPECT_EQ(s.blocks_inserted, 2u);
    EXPECT_EQ(s.blocks_held, 2u);
    EXPECT_EQ(s.bytes_held, 2 * block_bytes(*model));
    EXPECT_EQ(s.bytes_in_use, 2 * block_bytes(*model));  // the three CachedPrefix share them
    EXPECT_EQ(s.evictions, 0u);
    EXPECT_EQ(s.ram_budget_bytes, 12345u);
}

TEST(PrefixCache, ConcurrentUseStaysExact) {
    auto model = tiny();
    PrefixCache cache(*model, ram_only(6 * block_bytes(*model)));
    const auto common = pseudo_random_tokens(2 * B, 300, 99);
    std::vector<std::thread> threads;
    std::vector<int> failures(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            Evaluator evaluator(model, 1);
            for (int round = 0; round < 4; ++round) {
                const auto tokens = concat(
                    common, pseudo_random_tokens(20 + 10 * round, 300, static_cast<uint64_t>(1000 + 10 * t + round)));
                CachedPrefix hit = cache.acquire(tokens);
                std::vector<float> warm;
                evaluator.eval(hit.state, std::span(tokens).subspan(static_cast<size_t>(hit.reused_tokens)), &warm);
                const auto cold = eval_logits(model, tokens, {static_cast<int64_t>(tokens.size())}, 1);
                const size_t row = static_cast<size_t>(model->n_vocab());
                if (std::memcmp(warm.data() + warm.size() - row, cold.data() + cold.size() - row,
                                row * sizeof(float)) != 0)
                    ++failures[static_cast<size_t>(t)];
                cache.release(hit.state);
            }
        });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(failures, std::vector<int>(4, 0));
    cache.acquire(head(common, 3));  // the States are gone: this call evicts down to the budget
    const PrefixCacheStats s = cache.stats();
    EXPECT_EQ(s.lookups, 17u);
    EXPECT_GE(s.hits, 1u);
    EXPECT_LE(s.bytes_held, s.ram_budget_bytes);
}

}  // namespace
}  // namespace kvstash::test
