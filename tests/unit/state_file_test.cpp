// State files (docs/state-format.md): bitwise round trips (tokens, KV bytes, logits, sampler) and
// bitwise continuation after a load; q8_0 KV within the q8_0 step; compression; save -> load -> save
// byte-identical; inspecting a file without the model. Refused files: state_file_reject_test.cpp;
// atomic saves: state_file_save_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "format/quantize.h"
#include "format/tensor_type.h"
#include "kvstash/state_file.h"
#include "support/state_file_helpers.h"

namespace kvstash::test {
namespace {

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
    const StateFileInfo info = inspect_state_file(path("empty.kvs"), Checksums::verify);
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
        for (const SaveOptions& options : {SaveOptions{}, SaveOptions{.compress = true}}) {
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
            save_state(state, path("q8.kvs"), SaveOptions{.file_kv_type = KvType::q8_0});
            const StateFileInfo full = inspect_state_file(path("full.kvs"), Checksums::verify);
            const StateFileInfo q8 = inspect_state_file(path("q8.kvs"), Checksums::verify);
            EXPECT_EQ(q8.kv_type, KvType::q8_0);
            EXPECT_TRUE(q8.lossy_kv);
            EXPECT_FALSE(full.lossy_kv);
            EXPECT_TRUE(q8.checksums_ok);
            const int64_t n = model->info().n_embd_kv();
            const double expected_ratio =
                static_cast<double>((n + 31) / 32 * 34) / static_cast<double>(n * (kv_type == KvType::f16 ? 2 : 4));
            EXPECT_DOUBLE_EQ(static_cast<double>(q8.kv_bytes) / static_cast<double>(full.kv_bytes), expected_ratio);
            if (kv_type == KvType::f16 && n % 32 == 0) {
                EXPECT_NEAR(expected_ratio, 0.53, 0.01);
            }

            const State loaded = load_state(*model, path("q8.kvs"));
            ASSERT_EQ(StateAccess::kv(loaded).type(), StateAccess::kv(state).type());
            const TensorType t = StateAccess::kv(state).type();
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
    for (std::optional<KvType> file_kv_type : {std::optional<KvType>{}, std::optional<KvType>{KvType::q8_0}}) {
        save_state(state, path("z.kvs"), SaveOptions{.file_kv_type = file_kv_type, .compress = true});
        const StateFileInfo info = inspect_state_file(path("z.kvs"), Checksums::verify);
        EXPECT_TRUE(info.compressed);
        EXPECT_TRUE(info.checksums_ok);
        EXPECT_LT(info.file_bytes, plain.size());
        const State loaded = load_state(*model, path("z.kvs"));
        if (!file_kv_type) expect_same_state(state, loaded);
        if (file_kv_type == KvType::q8_0) {
            save_state(state, path("q8raw.kvs"), SaveOptions{.file_kv_type = KvType::q8_0});
            EXPECT_TRUE(kv_bytes(loaded) == kv_bytes(load_state(*model, path("q8raw.kvs"))));
        }
    }
}

TEST_F(StateFileTest, SaveLoadSaveIsByteIdentical) {
    auto model = Model::load(tiny("gqa_f16"));
    const State state = make_state(model, 70);
    for (bool compress : {false, true}) {
        save_state(state, path("a.kvs"), SaveOptions{.compress = compress});
        save_state(load_state(*model, path("a.kvs")), path("b.kvs"), SaveOptions{.compress = compress});
        EXPECT_EQ(read_file(path("a.kvs")), read_file(path("b.kvs"))) << "compress " << compress;
        EXPECT_EQ(read_file(path("a.kvs")), sf::encode_state_to_memory(state, SaveOptions{.compress = compress}));
    }
}

TEST_F(StateFileTest, InspectWithoutModel) {
    auto model = Model::load(tiny("gqa_f16"));
    save_state(make_state(model, 40), path("s.kvs"));
    const StateFileInfo info = inspect_state_file(path("s.kvs"), Checksums::verify);
    EXPECT_EQ(info.format_version, 2u);
    EXPECT_EQ(info.model_fingerprint, model_fingerprint(*model));
    EXPECT_EQ(info.model_name, model->info().name);
    EXPECT_EQ(info.n_tokens, 40);
    EXPECT_EQ(info.n_ctx, 256);
    EXPECT_EQ(info.kv_type, KvType::f16);
    EXPECT_FALSE(info.compressed);
    EXPECT_TRUE(info.has_logits);
    EXPECT_TRUE(info.has_sampler);
    EXPECT_EQ(info.file_bytes, fs::file_size(path("s.kvs")));
    EXPECT_EQ(info.kv_bytes, 2u * 2 * model->info().n_layer * 32 * model->info().n_embd_kv() * 2);
    EXPECT_TRUE(info.checksums_ok);

    auto bytes = read_file(path("s.kvs"));
    const Entry kv = entry_of(bytes, sf::kSectionKv);
    bytes[kv.offset + 100] ^= 0x10;
    write_file(path("bad.kvs"), bytes);
    const StateFileInfo bad = inspect_state_file(path("bad.kvs"), Checksums::verify);
    EXPECT_FALSE(bad.checksums_ok);
    EXPECT_NE(bad.checksum_error.find("section 'kv'"), std::string::npos) << bad.checksum_error;
    EXPECT_NO_THROW(inspect_state_file(path("bad.kvs"), Checksums::skip));
}

}  // namespace
}  // namespace kvstash::test
