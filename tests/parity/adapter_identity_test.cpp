// A State made under one adapter set is never silently reused under another (docs/adapters.md,
// "Identity"): state files are refused with a message that says so, prefix-cache blocks (RAM and the
// shared disk tier) are not matched, and a chat session that switches adapters computes its tokens
// again from the last point computed under the new set: bitwise a cold evaluation under it. The empty
// set is the model alone: its state files keep the model's own fingerprint (files made before adapters
// existed stay valid).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "kvstash/adapter.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/prefix_cache.h"
#include "kvstash/session.h"
#include "kvstash/state_file.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

struct Fixture {
    std::shared_ptr<const Model> model = Model::load(fixture_path("adapters/base.gguf"));
    std::shared_ptr<const AdapterSet> a = AdapterSet::load(
        *model, std::vector<AdapterFile>{{AdapterKind::lora, fixture_path("adapters/lora.gguf"), 1.0f}});
    std::shared_ptr<const AdapterSet> b = AdapterSet::load(
        *model, std::vector<AdapterFile>{{AdapterKind::control_vector, fixture_path("adapters/cvec.gguf"), 0.8f}});
    std::vector<int32_t> tokens = pseudo_random_tokens(80, 320, 7);  // 2 full KV blocks + 16
    Evaluator evaluator{model, 2};
    fs::path dir = fs::temp_directory_path() / ("kvstash_adapter_identity_" + std::to_string(::getpid()));

    Fixture() { fs::create_directories(dir); }
    ~Fixture() { fs::remove_all(dir); }
    StateOptions options(std::shared_ptr<const AdapterSet> set) const {
        return StateOptions{.kv_type = KvType::f16, .n_ctx = 256, .adapters = std::move(set)};
    }
    State evaluated(std::shared_ptr<const AdapterSet> set, std::span<const int32_t> t) {
        State s(*model, options(std::move(set)));
        evaluator.eval(s, t);
        return s;
    }
};

std::string load_error(const Model& model, const std::string& path, std::shared_ptr<const AdapterSet> set) {
    try {
        load_state(model, path, LoadOptions{std::move(set)});
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
        return e.what();
    }
    return {};
}

PrefixCacheOptions cache_options(std::shared_ptr<const AdapterSet> set, std::string disk = {}) {
    PrefixCacheOptions o;
    o.disk_dir = std::move(disk);
    o.adapters = std::move(set);
    return o;
}

SamplerParams greedy() {
    SamplerParams p;
    p.temperature = 0.0f;
    return p;
}

GenerateOptions max_tokens(int64_t n) {
    GenerateOptions g;
    g.max_tokens = n;
    return g;
}

bool same_logits(const State& x, const State& y) {
    return x.last_logits().size() == y.last_logits().size() &&
           std::memcmp(x.last_logits().data(), y.last_logits().data(), x.last_logits().size() * sizeof(float)) == 0;
}

TEST(AdapterIdentity, StateFilesAreBoundToTheirAdapterSet) {
    Fixture f;
    const std::string under_a = (f.dir / "a.kvs").string();
    const std::string plain = (f.dir / "plain.kvs").string();
    save_state(f.evaluated(f.a, f.tokens), under_a);
    save_state(f.evaluated(nullptr, f.tokens), plain);

    // Under none, under another set: refused, saying adapters differ (not "another model").
    const std::string none_error = load_error(*f.model, under_a, nullptr);
    EXPECT_NE(none_error.find("was saved under adapters"), std::string::npos) << none_error;
    EXPECT_NE(none_error.find("loaded without adapters"), std::string::npos) << none_error;
    const std::string other_error = load_error(*f.model, under_a, f.b);
    EXPECT_NE(other_error.find("was saved under adapters"), std::string::npos) << other_error;
    EXPECT_NE(other_error.find("cvec.gguf"), std::string::npos) << other_error;
    const std::string plain_error = load_error(*f.model, plain, f.a);
    EXPECT_NE(plain_error.find("was saved without adapters"), std::string::npos) << plain_error;
    EXPECT_THROW(load_state(*f.model, under_a), Error);

    // Under its own set (loaded again from its files: the same fingerprint): continues bitwise.
    const auto a_again = AdapterSet::load(*f.model, f.a->files());
    State restored = load_state(*f.model, under_a, LoadOptions{a_again});
    const std::span<const int32_t> more(f.tokens.data(), 5);
    f.evaluator.eval(restored, more);
    std::vector<int32_t> all = f.tokens;
    all.insert(all.end(), more.begin(), more.end());
    EXPECT_TRUE(same_logits(restored, f.evaluated(f.a, all)));

    // Without adapters the file is what it always was: the model's own fingerprint, no base fingerprint.
    const StateFileInfo plain_info = inspect_state_file(plain, Checksums::verify);
    EXPECT_EQ(plain_info.model_fingerprint, model_fingerprint(*f.model));
    EXPECT_TRUE(plain_info.base_model_fingerprint.empty());
    const StateFileInfo a_info = inspect_state_file(under_a, Checksums::verify);
    EXPECT_NE(a_info.model_fingerprint, model_fingerprint(*f.model));
    EXPECT_EQ(a_info.base_model_fingerprint, model_fingerprint(*f.model));
}

TEST(AdapterIdentity, PrefixCacheDoesNotMatchAcrossAdapterSets) {
    Fixture f;
    PrefixCache plain(*f.model);
    PrefixCache under_a(*f.model, cache_options(f.a));
    plain.release(f.evaluated(nullptr, f.tokens));
    under_a.release(f.evaluated(nullptr, f.tokens));  // another set's State: rejected
    EXPECT_EQ(under_a.stats().releases_rejected, 1u);
    EXPECT_EQ(under_a.acquire(f.tokens, f.options(f.a)).reused_tokens, 0);
    EXPECT_EQ(plain.acquire(f.tokens, f.options(f.a)).reused_tokens, 0);  // asked under A: a miss
    EXPECT_EQ(plain.acquire(f.tokens, f.options(nullptr)).reused_tokens, 64);

    under_a.release(f.evaluated(f.a, f.tokens));
    CachedPrefix hit = under_a.acquire(f.tokens, f.options(f.a));
    ASSERT_EQ(hit.reused_tokens, 64);
    f.evaluator.eval(hit.state, std::span(f.tokens).subspan(64));
    EXPECT_TRUE(same_logits(hit.state, f.evaluated(f.a, f.tokens)));
}

TEST(AdapterIdentity, DiskTierKeepsAdapterSetsApart) {
    Fixture f;
    const std::string disk = (f.dir / "cache").string();
    {
        PrefixCache writer(*f.model, cache_options(nullptr, disk));
        writer.release(f.evaluated(nullptr, f.tokens));
        ASSERT_GT(writer.stats().disk_blocks_written, 0u);
    }
    // A new cache (empty RAM) under A on the same directory finds nothing; one for the model alone does.
    PrefixCache reader_a(*f.model, cache_options(f.a, disk));
    EXPECT_EQ(reader_a.acquire(f.tokens, f.options(f.a)).reused_tokens, 0);
    EXPECT_EQ(reader_a.stats().disk_hits, 0u);
    PrefixCache reader(*f.model, cache_options(nullptr, disk));
    EXPECT_EQ(reader.acquire(f.tokens, f.options(nullptr)).reused_tokens, 64);
    EXPECT_GT(reader.stats().disk_hits, 0u);
}

TEST(AdapterIdentity, SessionSwitchingAdaptersRecomputesUnderTheNewSet) {
    Fixture f;
    const ChatTemplate tmpl = ChatTemplate::named("chatml");
    const std::string system = "You answer in riddles about the sea, the stars and the long roads between towns.";
    PrefixCache cache_a(*f.model, cache_options(f.a));
    {
        // Another session under A leaves the system prompt's blocks in A's cache.
        Session other(f.evaluator, tmpl, system, SessionOptions{f.options(f.a), &cache_a});
        Sampler sampler(greedy());
        other.reply("Hi", sampler, max_tokens(3));
    }
    Session chat(f.evaluator, tmpl, system, f.options(nullptr));
    Sampler sampler(greedy());
    chat.reply("Where does the road go?", sampler, max_tokens(4));
    const std::vector<int32_t> held(chat.state().tokens().begin(), chat.state().tokens().end());

    chat.set_adapters(f.a, &cache_a);
    ASSERT_EQ(chat.state().tokens().size(), held.size());
    EXPECT_GE(chat.last_turn().reused, 32);  // the system prompt's full blocks, computed under A by `other`
    EXPECT_LT(chat.last_turn().reused, static_cast<int64_t>(held.size()));
    EXPECT_TRUE(same_logits(chat.state(), f.evaluated(f.a, held)));  // bitwise a cold evaluation under A

    chat.set_adapters(f.b);  // no cache under B: everything again
    EXPECT_EQ(chat.last_turn().reused, 0);
    EXPECT_TRUE(same_logits(chat.state(), f.evaluated(f.b, held)));
    chat.set_adapters(nullptr);
    EXPECT_TRUE(same_logits(chat.state(), f.evaluated(nullptr, held)));
    EXPECT_FALSE(same_logits(f.evaluated(f.a, held), f.evaluated(nullptr, held)));
}

}  // namespace
}  // namespace kvstash::test
