// State files (docs/state-format.md): bitwise round trips (tokens, KV bytes, logits, sampler) and
// bitwise continuation after a load; q8_0 KV within the q8_0 step; compression; save -> load -> save
// byte-identical; every kind of damaged, foreign, newer or unknown file refused with a precise Error;
// atomic saves (a failed save leaves the old file and no temp file); the model fingerprint.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "format/gguf.h"
#include "format/quantize.h"
#include "format/tensor_type.h"
#include "kvstash/state_file.h"
#include "model/config.h"
#include "model/model_access.h"
#include "state/fingerprint.h"
#include "state/state_file_format.h"
#include "state/state_access.h"
#include "support/eval_helpers.h"
#include "support/gguf_builder.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;
namespace sf = state_file;

std::string tiny(const std::string& name) { return fixture_path("tiny/" + name + ".gguf"); }

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
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

SamplerState some_sampler(int64_t n_vocab) {
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
State make_state(const std::shared_ptr<const Model>& model, int64_t n, KvType kv_type = KvType::f16,
                 uint64_t seed = 5) {
    Evaluator evaluator(model, 1);
    State state(*model, StateOptions{kv_type, 256});
    evaluator.eval(state, pseudo_random_tokens(n, model->n_vocab(), seed));
    state.set_sampler_state(some_sampler(model->n_vocab()));
    return state;
}

// Rows [0, n_tokens) of every layer's K and V, in cache order.
std::vector<uint8_t> kv_bytes(const State& state) {
    const KvCache& kv = state.impl().kv;
    std::vector<uint8_t> out;
    for (int64_t b = 0; b < kv.n_blocks(); ++b) {
        const int64_t used = std::min<int64_t>(kv_block_tokens, kv.n_tokens() - b * kv_block_tokens);
        for (const uint8_t* part : {kv.block_k(b), kv.block_v(b)}) {
            for (int64_t layer = 0; layer < kv.n_layer(); ++layer) {
                const uint8_t* rows = part + static_cast<uint64_t>(layer) * kv_block_tokens * kv.row_bytes();
                out.insert(out.end(), rows, rows + used * kv.row_bytes());
            }
        }
    }
    return out;
}

void expect_same_state(const State& want, const State& got) {
    EXPECT_EQ(want.n_ctx(), got.n_ctx());
    ASSERT_EQ(want.n_tokens(), got.n_tokens());
    EXPECT_TRUE(std::equal(want.tokens().begin(), want.tokens().end(), got.tokens().begin()));
    ASSERT_EQ(want.last_logits().size(), got.last_logits().size());
    EXPECT_TRUE(std::equal(want.last_logits().begin(), want.last_logits().end(), got.last_logits().begin(),
                           [](float x, float y) { return std::memcmp(&x, &y, 4) == 0; }));
    EXPECT_EQ(want.impl().kv.type(), got.impl().kv.type());
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

struct Entry {
    uint32_t type;
    uint64_t offset, stored_bytes;
    uint8_t* at;  // the table entry
};

std::vector<Entry> entries(std::vector<uint8_t>& file) {
    std::vector<Entry> out;
    const uint32_t count = sf::load_le<uint32_t>(&file[sf::header::section_count]);
    for (uint32_t i = 0; i < count; ++i) {
        uint8_t* e = file.data() + sf::kHeaderBytes + sf::kSectionEntryBytes * i;
        out.push_back({sf::load_le<uint32_t>(e), sf::load_le<uint64_t>(e + sf::entry::offset),
                       sf::load_le<uint64_t>(e + sf::entry::stored_bytes), e});
    }
    return out;
}

Entry entry_of(std::vector<uint8_t>& file, uint32_t type) {
    for (const Entry& e : entries(file)) {
        if (e.type == type) return e;
    }
    throw std::runtime_error("no section " + sf::section_name(type));
}

State decode(const Model& model, const std::vector<uint8_t>& bytes) {
    return sf::decode_state(model, bytes, "test.kvs");
}

TEST_F(StateFileTest, RoundTripIsBitwise) {
    for (const char* name : {"gqa_f16", "llama3_rope_f32", "q_q8_0"}) {
        for (KvType kv_type : {KvType::f16, KvType::f32}) {
            SCOPED_TRACE(std::string(name) + (kv_type == KvType::f16 ? " f16" : " f32"));
            auto model = Model::load(tiny(name));
            const State state = make_state(model, 40, kv_type);
            save_state(state, path("s.kvs"));
            const State loaded = load_state(*model, path("s.kvs"));
            expect_same_state(state, loaded);
            EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1) << "temp file left";
        }
    }
}

TEST_F(StateFileTest, EmptyStateAndStateWithoutLogitsRoundTrip) {
    auto model = Model::load(tiny("gqa_f32"));
    const State empty(*model, StateOptions{KvType::f16, 100});
    save_state(empty, path("empty.kvs"));
    const State loaded = load_state(*model, path("empty.kvs"));
    expect_same_state(empty, loaded);
    const StateFileInfo info = inspect_state_file(path("empty.kvs"), true);
    EXPECT_FALSE(info.has_logits);
    EXPECT_FALSE(info.has_sampler);
    EXPECT_EQ(info.n_ctx, 100);

    State truncated = make_state(model, 45);
    truncated.truncate(33);  // no logits; the last block holds stale rows past position 33
    const auto bytes = sf::encode_state_to_memory(truncated);
    expect_same_state(truncated, decode(*model, bytes));
    EXPECT_EQ(bytes, sf::encode_state_to_memory(decode(*model, bytes)));
}

TEST_F(StateFileTest, ContinuationAfterLoadIsBitwiseEqualToNeverSaving) {
    for (const char* name : {"gqa_f16", "q_q4_k"}) {
        SCOPED_TRACE(name);
        auto model = Model::load(tiny(name));
        Evaluator evaluator(model, 2);
        State original = make_state(model, 37);
        for (const SaveOptions& options : {SaveOptions{}, SaveOptions{StateKvStorage::same, true}}) {
            save_state(original, path("s.kvs"), options);
            State kept = original.fork();
            State loaded = load_state(*model, path("s.kvs"));
            const auto more = pseudo_random_tokens(30, model->n_vocab(), 77);
            std::vector<float> want, got;
            evaluator.eval(kept, more, &want);
            evaluator.eval(loaded, more, &got);
            ASSERT_EQ(want.size(), got.size());
            EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                << "logits after load differ";
        }
    }
}

TEST_F(StateFileTest, DefaultModelRoundTripAndContinuation) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    auto model = Model::load(default_model_path());
    Evaluator evaluator(model, 2);
    State original(*model, StateOptions{KvType::f16, 512});
    evaluator.eval(original, pseudo_random_tokens(40, model->n_vocab(), 3));
    save_state(original, path("smol.kvs"));
    State loaded = load_state(*model, path("smol.kvs"));
    expect_same_state(original, loaded);
    const auto more = pseudo_random_tokens(5, model->n_vocab(), 4);
    std::vector<float> want, got;
    evaluator.eval(original, more, &want);
    evaluator.eval(loaded, more, &got);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
}

TEST_F(StateFileTest, Q8_0KvIsCloseAndAboutHalfTheSize) {
    // gqa: n_embd_kv 48 (a zero-padded q8_0 block per row); q_q8_0: 128.
    for (const char* name : {"gqa_f16", "q_q8_0"}) {
        for (KvType kv_type : {KvType::f16, KvType::f32}) {
            SCOPED_TRACE(std::string(name) + (kv_type == KvType::f16 ? " f16" : " f32"));
            auto model = Model::load(tiny(name));
            const State state = make_state(model, 64, kv_type);
            save_state(state, path("full.kvs"));
            save_state(state, path("q8.kvs"), SaveOptions{StateKvStorage::q8_0, false});
            const StateFileInfo full = inspect_state_file(path("full.kvs"), true);
            const StateFileInfo q8 = inspect_state_file(path("q8.kvs"), true);
            EXPECT_EQ(q8.kv_type, "q8_0");
            EXPECT_TRUE(q8.lossy_kv);
            EXPECT_FALSE(full.lossy_kv);
            EXPECT_TRUE(q8.checksums_ok);
            const int64_t n = model->config().n_embd_kv();
            const double expected_ratio =
                static_cast<double>((n + 31) / 32 * 34) / static_cast<double>(n * (kv_type == KvType::f16 ? 2 : 4));
            EXPECT_DOUBLE_EQ(static_cast<double>(q8.kv_bytes) / static_cast<double>(full.kv_bytes), expected_ratio);
            if (kv_type == KvType::f16 && n % 32 == 0) {
                EXPECT_NEAR(expected_ratio, 0.53, 0.01);
            }

            const State loaded = load_state(*model, path("q8.kvs"));
            ASSERT_EQ(loaded.impl().kv.type(), state.impl().kv.type());
            const TensorType t = state.impl().kv.type();
            const std::vector<uint8_t> a = kv_bytes(state), b = kv_bytes(loaded);
            ASSERT_EQ(a.size(), b.size());
            const size_t width = static_cast<size_t>(n), elem = t == TensorType::F16 ? 2 : 4;
            std::vector<float> x(width), y(width);
            for (size_t row = 0; row < a.size() / (width * elem); ++row) {
                dequantize_row(t, a.data() + row * width * elem, x.data(), n);
                dequantize_row(t, b.data() + row * width * elem, y.data(), n);
                for (size_t blk = 0; blk < width; blk += 32) {
                    const size_t end = std::min(width, blk + 32);
                    float amax = 0;
                    for (size_t i = blk; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
                    // q8_0 step d = amax/127: rounding to the step (d/2), d rounded to fp16 (127 q × 2^-11 d),
                    // then the value rounded back to the cache type (2^-11 relative for f16).
                    const float d = amax / 127.0f;
                    for (size_t i = blk; i < end; ++i) {
                        const float tol = d * (0.5f + 127.0f / 2048.0f) * 1.001f + std::fabs(x[i]) / 1024.0f;
                        ASSERT_LE(std::fabs(x[i] - y[i]), tol) << "row " << row << " element " << i;
                    }
                }
            }
            EXPECT_TRUE(std::equal(state.tokens().begin(), state.tokens().end(), loaded.tokens().begin()));
            EXPECT_EQ(0, std::memcmp(state.last_logits().data(), loaded.last_logits().data(),
                                     state.last_logits().size_bytes()));
        }
    }
}

TEST(QuantizeQ8_0, MatchesTheGgmlFormula) {
    std::vector<float> x(64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f) * (i < 32 ? 3.0f : 0.001f);
    x[40] = 0.0f;
    std::vector<uint8_t> q(2 * 34);
    quantize_row_q8_0(x.data(), q.data(), 64);
    std::vector<float> back(64);
    dequantize_row(TensorType::Q8_0, q.data(), back.data(), 64);
    for (int blk = 0; blk < 2; ++blk) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(blk * 32 + i)]));
        uint16_t d16;
        std::memcpy(&d16, &q[static_cast<size_t>(blk) * 34], 2);
        EXPECT_EQ(d16, fp32_to_fp16(amax / 127.0f));
        for (int i = 0; i < 32; ++i) {
            const size_t k = static_cast<size_t>(blk * 32 + i);
            EXPECT_EQ(static_cast<int8_t>(q[static_cast<size_t>(blk) * 34 + 2 + static_cast<size_t>(i)]),
                      static_cast<int8_t>(std::round(x[k] * (127.0f / amax))))
                << k;
        }
    }
    std::vector<float> zeros(32, 0.0f);
    quantize_row_q8_0(zeros.data(), q.data(), 32);
    EXPECT_TRUE(std::all_of(q.begin(), q.begin() + 34, [](uint8_t b) { return b == 0; }));
    expect_error([&] { quantize_row_q8_0(x.data(), q.data(), 31); }, ErrorCode::invalid_argument, "multiple of 32");
}

TEST_F(StateFileTest, CompressedRoundTrip) {
    auto model = Model::load(tiny("llama3_rope_f32"));
    Evaluator evaluator(model, 1);
    State state(*model, StateOptions{KvType::f16, 512});
    evaluator.eval(state, std::vector<int32_t>(200, 11));  // repetitive: tokens and layer-0 V compress well
    const auto plain = sf::encode_state_to_memory(state);
    for (StateKvStorage storage : {StateKvStorage::same, StateKvStorage::q8_0}) {
        save_state(state, path("z.kvs"), SaveOptions{storage, true});
        const StateFileInfo info = inspect_state_file(path("z.kvs"), true);
        EXPECT_TRUE(info.compressed);
        EXPECT_TRUE(info.checksums_ok);
        EXPECT_LT(info.file_bytes, plain.size());
        const State loaded = load_state(*model, path("z.kvs"));
        if (storage == StateKvStorage::same) expect_same_state(state, loaded);
        if (storage == StateKvStorage::q8_0) {
            save_state(state, path("q8raw.kvs"), SaveOptions{storage, false});
            EXPECT_TRUE(kv_bytes(loaded) == kv_bytes(load_state(*model, path("q8raw.kvs"))));
        }
    }
}

TEST_F(StateFileTest, SaveLoadSaveIsByteIdentical) {
    auto model = Model::load(tiny("gqa_f16"));
    const State state = make_state(model, 70);
    for (bool compress : {false, true}) {
        save_state(state, path("a.kvs"), SaveOptions{StateKvStorage::same, compress});
        save_state(load_state(*model, path("a.kvs")), path("b.kvs"), SaveOptions{StateKvStorage::same, compress});
        EXPECT_EQ(read_file(path("a.kvs")), read_file(path("b.kvs"))) << "compress " << compress;
        EXPECT_EQ(read_file(path("a.kvs")),
                  sf::encode_state_to_memory(state, SaveOptions{StateKvStorage::same, compress}));
    }
}

TEST_F(StateFileTest, InspectWithoutModel) {
    auto model = Model::load(tiny("gqa_f16"));
    save_state(make_state(model, 40), path("s.kvs"));
    const StateFileInfo info = inspect_state_file(path("s.kvs"), true);
    EXPECT_EQ(info.format_version, 1u);
    EXPECT_EQ(info.model_fingerprint, model_fingerprint(*model));
    EXPECT_EQ(info.model_name, model->config().name);
    EXPECT_EQ(info.n_tokens, 40);
    EXPECT_EQ(info.n_ctx, 256);
    EXPECT_EQ(info.kv_type, "f16");
    EXPECT_FALSE(info.compressed);
    EXPECT_TRUE(info.has_logits);
    EXPECT_TRUE(info.has_sampler);
    EXPECT_EQ(info.file_bytes, fs::file_size(path("s.kvs")));
    EXPECT_EQ(info.kv_bytes, 2u * 2 * model->config().n_layer * 32 * model->config().n_embd_kv() * 2);
    EXPECT_TRUE(info.checksums_ok);

    auto bytes = read_file(path("s.kvs"));
    const Entry kv = entry_of(bytes, sf::kSectionKv);
    bytes[kv.offset + 100] ^= 0x10;
    write_file(path("bad.kvs"), bytes);
    const StateFileInfo bad = inspect_state_file(path("bad.kvs"), true);
    EXPECT_FALSE(bad.checksums_ok);
    EXPECT_NE(bad.checksum_error.find("section 'kv'"), std::string::npos) << bad.checksum_error;
    EXPECT_NO_THROW(inspect_state_file(path("bad.kvs"), false));
}

TEST_F(StateFileTest, DamagedFilesAreRefusedPrecisely) {
    auto model = Model::load(tiny("gqa_f16"));
    const auto good = sf::encode_state_to_memory(make_state(model, 40));

    auto wrong_magic = good;
    wrong_magic[0] = 'X';
    expect_error([&] { decode(*model, wrong_magic); }, ErrorCode::bad_format, "not a kvstash state file");
    write_file(path("gguf.kvs"), read_file(tiny("gqa_f16")));
    expect_error([&] { load_state(*model, path("gguf.kvs")); }, ErrorCode::bad_format, "gguf.kvs");
    write_file(path("empty.kvs"), {});
    expect_error([&] { load_state(*model, path("empty.kvs")); }, ErrorCode::bad_format, "not a kvstash state file");
    expect_error([&] { load_state(*model, path("missing.kvs")); }, ErrorCode::io, "missing.kvs");

    int truncations = 0;
    for (size_t n = 0; n < good.size(); n += 97, ++truncations) {
        const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
        try {
            decode(*model, cut);
            ADD_FAILURE() << "truncated to " << n << " bytes: accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::bad_format) << n << ": " << e.what();
        }
    }
    EXPECT_GT(truncations, 100);
    expect_error([&] { decode(*model, {good.begin(), good.end() - 1}); }, ErrorCode::bad_format, "truncated");
    auto longer = good;
    longer.push_back(0);
    expect_error([&] { decode(*model, longer); }, ErrorCode::bad_format, "trailing data");

    // A flipped bit in each section names it; in the header and the table, their own checksums.
    auto bytes = good;
    for (const Entry& e : entries(bytes)) {
        auto flipped = good;
        flipped[e.offset + e.stored_bytes / 2] ^= 0x04;
        expect_error([&] { decode(*model, flipped); }, ErrorCode::bad_format,
                     "checksum mismatch in section '" + sf::section_name(e.type) + "'");
    }
    auto header = good;
    header[sf::header::file_bytes + 3] ^= 1;
    expect_error([&] { decode(*model, header); }, ErrorCode::bad_format, "header checksum mismatch");
    auto table = good;
    table[sf::kHeaderBytes + 2 * sf::kSectionEntryBytes + sf::entry::raw_bytes] ^= 1;
    expect_error([&] { decode(*model, table); }, ErrorCode::bad_format, "section table checksum mismatch");
    auto padding = good;
    const Entry meta = entry_of(bytes, sf::kSectionMeta);
    ASSERT_NE((meta.offset + meta.stored_bytes) % 64, 0u);
    padding[meta.offset + meta.stored_bytes] = 1;  // between meta and the next section
    expect_error([&] { decode(*model, padding); }, ErrorCode::bad_format, "outside every section");

    // Checksums made right again: the contents are checked on their own.
    auto patched = [&](auto&& edit) {
        auto b = good;
        edit(b);
        sf::rewrite_checksums(b);
        return b;
    };
    const uint64_t m = meta.offset;
    expect_error([&] { decode(*model, patched([&](auto& b) { sf::store_le<int64_t>(&b[m + sf::meta::n_ctx], 39); })); },
                 ErrorCode::bad_format, "n_tokens 40 is outside [0, 39]");
    expect_error(
        [&] { decode(*model, patched([&](auto& b) { sf::store_le<int64_t>(&b[m + sf::meta::n_vocab], 301); })); },
        ErrorCode::bad_format, "section 'logits' holds 1200 bytes");
    expect_error(
        [&] { decode(*model, patched([&](auto& b) { sf::store_le<int64_t>(&b[m + sf::meta::n_tokens], 65); })); },
        ErrorCode::bad_format, "section 'kv' holds");
    expect_error(
        [&] { decode(*model, patched([&](auto& b) { sf::store_le<uint32_t>(&b[m + sf::meta::kv_encoding], 2); })); },
        ErrorCode::bad_format, "KV stored as type 2");
    const uint64_t t = entry_of(bytes, sf::kSectionTokens).offset;
    expect_error([&] { decode(*model, patched([&](auto& b) { sf::store_le<int32_t>(&b[t + 4 * 7], 300); })); },
                 ErrorCode::bad_format, "token 300 at position 7 is outside the vocabulary");
    const uint64_t s = entry_of(bytes, sf::kSectionSampler).offset;
    expect_error(
        [&] { decode(*model, patched([&](auto& b) { sf::store_le<float>(&b[s + sf::sampler::top_p], 2.0f); })); },
        ErrorCode::bad_format, "top_p");
    expect_error(
        [&] { decode(*model, patched([&](auto& b) { sf::store_le<int32_t>(&b[s + sf::kSamplerFixedBytes], 300); })); },
        ErrorCode::bad_format, "logit_bias token id 300");
    const Entry kv = entry_of(bytes, sf::kSectionKv);
    expect_error(
        [&] {
            decode(*model, patched([&](auto& b) {
                sf::store_le<uint64_t>(kv.at - bytes.data() + b.data() + sf::entry::offset, meta.offset);
            }));
        },
        ErrorCode::bad_format, "overlap");
    expect_error(
        [&] {
            decode(*model, patched([&](auto& b) {
                sf::store_le<uint64_t>(kv.at - bytes.data() + b.data() + sf::entry::offset, kv.offset + 64);
            }));
        },
        ErrorCode::bad_format, "extends past the end of the file");
    expect_error(
        [&] { decode(*model, patched([&](auto& b) { sf::store_le<uint32_t>(&b[sf::header::section_count], 65); })); },
        ErrorCode::bad_format, "section count 65");
}

TEST_F(StateFileTest, CompressedSectionsAreCheckedToo) {
    auto model = Model::load(tiny("llama3_rope_f32"));
    Evaluator evaluator(model, 1);
    State state(*model, StateOptions{KvType::f16, 512});
    evaluator.eval(state, std::vector<int32_t>(200, 11));
    auto good = sf::encode_state_to_memory(state, SaveOptions{StateKvStorage::same, true});
    int compressed = 0;
    for (const Entry& e : entries(good)) {
        if ((sf::load_le<uint32_t>(e.at + sf::entry::flags) & sf::kFlagZstd) == 0) continue;
        ++compressed;
        SCOPED_TRACE(sf::section_name(e.type));
        auto flipped = good;  // a damaged frame whose checksum was made to match: zstd or the sizes catch it
        flipped[e.offset + e.stored_bytes / 2] ^= 0x55;
        sf::rewrite_checksums(flipped);
        try {
            decode(*model, flipped);
        } catch (const Error& err) {
            EXPECT_EQ(err.code(), ErrorCode::bad_format) << err.what();
        }
        auto ratio = good;  // a declared size beyond 256:1
        sf::store_le<uint64_t>(e.at - good.data() + ratio.data() + sf::entry::raw_bytes, e.stored_bytes * 257);
        sf::rewrite_checksums(ratio);
        expect_error([&] { decode(*model, ratio); }, ErrorCode::bad_format, "more than the 256:1");
    }
    EXPECT_GE(compressed, 3);  // meta, tokens and kv at least
}

TEST_F(StateFileTest, NewerVersionsAndUnknownFeaturesAreUnsupported) {
    auto model = Model::load(tiny("gqa_f16"));
    const auto good = sf::encode_state_to_memory(make_state(model, 40));
    auto edit = [&](auto&& change) {
        auto b = good;
        change(b);
        sf::rewrite_checksums(b);
        return b;
    };
    expect_error(
        [&] { decode(*model, edit([](auto& b) { sf::store_le<uint32_t>(&b[sf::header::format_version], 2); })); },
        ErrorCode::unsupported, "format version 2 is newer than this kvstash reads (1 to 1)");
    expect_error(
        [&] { decode(*model, edit([](auto& b) { sf::store_le<uint32_t>(&b[sf::header::format_version], 0); })); },
        ErrorCode::bad_format, "format version 0 does not exist");
    expect_error([&] { decode(*model, edit([](auto& b) { sf::store_le<uint32_t>(&b[sf::header::flags], 4); })); },
                 ErrorCode::unsupported, "file flags");
    const size_t first_entry = sf::kHeaderBytes;
    expect_error(
        [&] { decode(*model, edit([&](auto& b) { sf::store_le<uint32_t>(&b[first_entry + sf::entry::flags], 2); })); },
        ErrorCode::unsupported, "uses flags 0x0000000000000002 unknown");
    auto copy = good;
    const uint8_t* sampler_entry = entry_of(copy, sf::kSectionSampler).at;
    const size_t sampler_at = static_cast<size_t>(sampler_entry - copy.data());
    expect_error([&] { decode(*model, edit([&](auto& b) { sf::store_le<uint32_t>(&b[sampler_at], 9); })); },
                 ErrorCode::unsupported, "type unknown to this kvstash and required");
    // An unknown ancillary section is skipped.
    const State skipped = decode(*model, edit([&](auto& b) { sf::store_le<uint32_t>(&b[sampler_at], 0x8000'0009u); }));
    EXPECT_EQ(skipped.sampler_state(), nullptr);
    EXPECT_EQ(skipped.n_tokens(), 40);
}

// Writes a copy of the GGUF at `src` with metadata and tensors passed through `edit_value`/`edit_tensor`.
std::string rebuilt_gguf(const std::string& src, const std::string& dst,
                         const std::function<void(const std::string&, gguf::Value&)>& edit_value,
                         const std::function<void(const std::string&, std::vector<uint8_t>&)>& edit_tensor) {
    auto file = gguf::File::open(src);
    GgufBuilder builder;
    for (auto [key, value] : file->metadata()) {
        edit_value(key, value);
        builder.add(key, value);
    }
    for (const auto& t : file->tensors()) {
        std::vector<uint8_t> data(file->tensor_data(t), file->tensor_data(t) + t.n_bytes);
        edit_tensor(t.name, data);
        builder.add_tensor(t.name, t.raw_type, {t.dims.begin(), t.dims.end()}, data);
    }
    builder.write(dst);
    return dst;
}

TEST_F(StateFileTest, FingerprintBindsWeightsAndTokenizerNotNames) {
    auto model = Model::load(tiny("gqa_f32"));
    save_state(make_state(model, 40), path("s.kvs"));
    const std::string fp = model_fingerprint(*model);
    EXPECT_EQ(fp.size(), 32u);
    EXPECT_EQ(fp, model_fingerprint(*model));
    EXPECT_EQ(fp, compute_model_fingerprint(*model->impl().file).hex());

    auto keep = [](const std::string&, auto&) {};
    // Another file name and general.name: the same model.
    auto renamed = Model::load(rebuilt_gguf(
        tiny("gqa_f32"), path("renamed.gguf"),
        [](const std::string& key, gguf::Value& v) {
            if (key == "general.name") v.string = "something else";
        },
        keep));
    EXPECT_EQ(model_fingerprint(*renamed), fp);
    EXPECT_EQ(load_state(*renamed, path("s.kvs")).n_tokens(), 40);

    // Identical shapes and types, one weight changed: refused, naming both fingerprints.
    auto changed = Model::load(rebuilt_gguf(tiny("gqa_f32"), path("changed.gguf"), keep,
                                            [](const std::string& name, std::vector<uint8_t>& data) {
                                                if (name == "blk.1.ffn_down.weight") data[8] ^= 1;
                                            }));
    EXPECT_NE(model_fingerprint(*changed), fp);
    expect_error([&] { load_state(*changed, path("s.kvs")); }, ErrorCode::invalid_argument, fp);
    expect_error([&] { load_state(*changed, path("s.kvs")); }, ErrorCode::invalid_argument,
                 model_fingerprint(*changed));

    // The tokenizer is part of the model.
    auto retokenized = Model::load(rebuilt_gguf(
        tiny("gqa_f32"), path("tok.gguf"),
        [](const std::string& key, gguf::Value& v) {
            if (key == "tokenizer.ggml.tokens") v.array[50].string += "x";
        },
        keep));
    EXPECT_NE(model_fingerprint(*retokenized), fp);

    // The same shapes, other weights (the f16 version of the same model).
    auto other = Model::load(tiny("gqa_f16"));
    expect_error([&] { load_state(*other, path("s.kvs")); }, ErrorCode::invalid_argument,
                 "load it with the model it was saved from");
}

TEST_F(StateFileTest, FailedSaveLeavesTheOldFile) {
    auto model = Model::load(tiny("gqa_f16"));
    const State small = make_state(model, 3);
    const State big = make_state(model, 200, KvType::f32);
    save_state(small, path("s.kvs"));
    const auto old_bytes = read_file(path("s.kvs"));

    // A file size limit makes the write fail (EFBIG) part-way.
    struct rlimit saved {};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
    const auto old_handler = signal(SIGXFSZ, SIG_IGN);
    struct rlimit small_limit = saved;
    small_limit.rlim_cur = 16384;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small_limit), 0);
    expect_error([&] { save_state(big, path("s.kvs")); }, ErrorCode::io,
                 "cannot save state file '" + path("s.kvs") + "'");
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, old_handler);
    EXPECT_EQ(read_file(path("s.kvs")), old_bytes);
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1) << "temp file left";

    expect_error([&] { save_state(small, path("no/such/dir/s.kvs")); }, ErrorCode::io, "No such file or directory");
}

// Disk full for real: a 64 KiB tmpfs (needs root and mount permission; skipped otherwise).
TEST_F(StateFileTest, DiskFullLeavesTheOldFile) {
    const std::string mnt = path("full");
    fs::create_directories(mnt);
    if (geteuid() != 0 || ::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
        GTEST_SKIP() << "cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN); the RLIMIT_FSIZE test covers "
                        "the write path";
    }
    struct Unmount {
        std::string at;
        ~Unmount() { ::umount(at.c_str()); }
    } unmount{mnt};
    auto model = Model::load(tiny("gqa_f16"));
    const State small = make_state(model, 3);
    const State big = make_state(model, 250, KvType::f32);  // ~190 KB of KV
    const std::string file = mnt + "/s.kvs";
    save_state(small, file);
    const auto old_bytes = read_file(file);
    expect_error([&] { save_state(big, file); }, ErrorCode::io, "No space left on device");
    EXPECT_EQ(read_file(file), old_bytes);
    EXPECT_EQ(std::distance(fs::directory_iterator(mnt), fs::directory_iterator()), 1) << "temp file left";
    EXPECT_EQ(load_state(*model, file).n_tokens(), 3);
}

TEST_F(StateFileTest, UnsaveableSamplerIsRefusedAtSave) {
    auto model = Model::load(tiny("gqa_f16"));
    State state = make_state(model, 5);
    SamplerState bad = some_sampler(model->n_vocab());
    bad.params.logit_bias.push_back({static_cast<int32_t>(model->n_vocab()), 1.0f});
    state.set_sampler_state(bad);
    expect_error([&] { save_state(state, path("s.kvs")); }, ErrorCode::invalid_argument, "logit_bias token id 300");
    EXPECT_FALSE(fs::exists(path("s.kvs")));
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0) << "temp file left";
}

}  // namespace
}  // namespace kvstash::test
