// Shared by the state-file tests (tests/unit/state_file*_test.cpp): a scratch directory per test, a
// state with every section filled, byte-level comparison of States, and the section table of a file.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/kv_block_staging.h"
#include "kv/kv_cache.h"
#include "kvstash/evaluator.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "state/state_access.h"
#include "state/state_file_format.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {

namespace fs = std::filesystem;
namespace sf = state_file;

inline std::string tiny(const std::string& name) { return fixture_path("tiny/" + name + ".gguf"); }

inline std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A scratch directory per test, removed afterwards.
class StateFileTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_state_file_" + std::to_string(getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

    std::string dir_;
};

inline SamplerState some_sampler(int64_t n_vocab) {
    SamplerState s;
    s.params.temperature = 0.7f;
    s.params.top_k = 17;
    s.params.top_p = 0.9f;
    s.params.min_p = 0.01f;
    s.params.repeat_penalty = 1.1f;
    s.params.repeat_last_n = 32;
    s.params.presence_penalty = 0.25f;
    s.params.frequency_penalty = -0.5f;
    s.params.logit_bias = {{3, -INFINITY}, {static_cast<int32_t>(n_vocab - 1), 2.5f}};
    s.params.seed = 0x1234'5678'9abc'def0ull;
    s.rng = {1, 0xffff'ffff'ffff'ffffull, 42, 7};
    return s;
}

// A state of `n` pseudo-random tokens (crossing a KV block boundary when n > 32), with a sampler.
inline State make_state(const std::shared_ptr<const Model>& model, int64_t n, KvType kv_type = KvType::f16,
                        uint64_t seed = 5) {
    Evaluator evaluator(model, 1);
    State state(*model, StateOptions{kv_type, 256});
    evaluator.eval(state, pseudo_random_tokens(n, model->n_vocab(), seed));
    state.set_sampler_state(some_sampler(model->n_vocab()));
    return state;
}

// Rows [0, n_tokens) of every layer's K and V, in cache order.
inline std::vector<uint8_t> kv_bytes(const State& state) {
    const KvCache& kv = StateAccess::kv(state);
    std::vector<uint8_t> out;
    KvBlockStaging staging;
    for (int64_t b = 0; b < kv.n_blocks(); ++b) {
        const int64_t used = std::min<int64_t>(kv_block_tokens, kv.n_tokens() - b * kv_block_tokens);
        for (const KvHalf half : {KvHalf::keys, KvHalf::values}) {
            const uint8_t* part = staging.read(kv.block(b), half).data();
            for (int64_t layer = 0; layer < kv.n_layer(); ++layer) {
                const uint8_t* rows = part + static_cast<uint64_t>(layer) * kv_block_tokens * kv.row_bytes();
                out.insert(out.end(), rows, rows + used * kv.row_bytes());
            }
        }
    }
    return out;
}

inline void expect_same_state(const State& want, const State& got) {
    EXPECT_EQ(want.n_ctx(), got.n_ctx());
    ASSERT_EQ(want.n_tokens(), got.n_tokens());
    EXPECT_TRUE(std::equal(want.tokens().begin(), want.tokens().end(), got.tokens().begin()));
    ASSERT_EQ(want.last_logits().size(), got.last_logits().size());
    EXPECT_TRUE(std::equal(want.last_logits().begin(), want.last_logits().end(), got.last_logits().begin(),
                           [](float x, float y) { return std::memcmp(&x, &y, 4) == 0; }));
    EXPECT_EQ(StateAccess::kv(want).type(), StateAccess::kv(got).type());
    EXPECT_TRUE(kv_bytes(want) == kv_bytes(got)) << "KV bytes differ";
    ASSERT_EQ(want.sampler_state() != nullptr, got.sampler_state() != nullptr);
    if (want.sampler_state() != nullptr) {
        const SamplerState &a = *want.sampler_state(), &b = *got.sampler_state();
        EXPECT_EQ(0, std::memcmp(&a.params.temperature, &b.params.temperature, 4));
        EXPECT_EQ(a.params.top_k, b.params.top_k);
        EXPECT_EQ(a.params.top_p, b.params.top_p);
        EXPECT_EQ(a.params.min_p, b.params.min_p);
        EXPECT_EQ(a.params.repeat_penalty, b.params.repeat_penalty);
        EXPECT_EQ(a.params.repeat_last_n, b.params.repeat_last_n);
        EXPECT_EQ(a.params.presence_penalty, b.params.presence_penalty);
        EXPECT_EQ(a.params.frequency_penalty, b.params.frequency_penalty);
        EXPECT_EQ(a.params.logit_bias, b.params.logit_bias);
        EXPECT_EQ(a.params.seed, b.params.seed);
        EXPECT_EQ(a.rng, b.rng);
    }
}

// Expects `call` to throw Error(code) whose message contains `needle`.
template <typename Call>
void expect_error(Call&& call, ErrorCode code, const std::string& needle) {
    try {
        call();
        ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const Error& e) {
        EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

// A section-table entry as the library decodes it, and where it sits in the file (for tests that edit it).
struct Entry : sf::SectionEntry {
    uint8_t* at;  // the table entry
};

inline std::vector<Entry> entries(std::vector<uint8_t>& file) {
    std::vector<Entry> out;
    const uint32_t count = sf::load_le<uint32_t>(&file[sf::header::section_count]);
    for (uint32_t i = 0; i < count; ++i) {
        uint8_t* e = file.data() + sf::kHeaderBytes + sf::kSectionEntryBytes * i;
        out.push_back({sf::load_section_entry(e), e});
    }
    return out;
}

inline Entry entry_of(std::vector<uint8_t>& file, uint32_t type) {
    for (const Entry& e : entries(file)) {
        if (e.type == type) return e;
    }
    throw std::runtime_error("no section " + sf::section_name(type));
}

inline State decode(const Model& model, const std::vector<uint8_t>& bytes) {
    return sf::decode_state(model, bytes, "test.kvs");
}

}  // namespace kvstash::test
