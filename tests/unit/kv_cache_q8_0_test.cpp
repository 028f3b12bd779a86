// The q8_0 KV cache's rows (docs/kv-cache.md): quantized once, when a token's K/V is produced, with ggml's
// reference rounding, so that the bytes are ggml's (checked against gguf-py's quantizer on fixture rows,
// tests/reference/make_kv_q8_0_fixture.py), and from that row alone (a layer-0 row of a q8_0 cache is the
// quantization of the same row in an f32 cache, however the tokens were batched). Also: a State refuses
// q8_0 for a head size that is not a multiple of 32; a q8_0 cache holds about 34/64 of f16's bytes; the
// prefix cache reuses q8_0 blocks for q8_0 requests only, exactly.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/quantize.h"
#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/prefix_cache.h"
#include "state/state_access.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash {
namespace {

std::vector<uint8_t> from_hex(const std::string& hex) {
    std::vector<uint8_t> out(hex.size() / 2);
    for (size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    return out;
}

TEST(KvCacheQ8_0, QuantizerMatchesGgufPyBytes) {
    std::ifstream in(test::fixture_path("quant/kv_q8_0_rows.json"));
    ASSERT_TRUE(in) << "missing fixture; run tests/reference/make_kv_q8_0_fixture.py";
    const nlohmann::json doc = nlohmann::json::parse(in);
    const auto row = doc.at("row_values").get<int64_t>();
    const std::vector<uint8_t> value_bytes = from_hex(doc.at("values_hex").get<std::string>());
    const std::vector<uint8_t> want = from_hex(doc.at("blocks_hex").get<std::string>());
    std::vector<float> values(value_bytes.size() / 4);
    std::memcpy(values.data(), value_bytes.data(), value_bytes.size());
    const auto n_rows = static_cast<int64_t>(values.size()) / row;
    ASSERT_EQ(want.size(), static_cast<size_t>(n_rows) * tensor_row_bytes(TensorType::Q8_0, row));
    std::vector<uint8_t> got(want.size());
    const uint64_t row_bytes = tensor_row_bytes(TensorType::Q8_0, row);
    for (int64_t r = 0; r < n_rows; ++r) {
        quantize_row_q8_0(values.data() + r * row, got.data() + static_cast<uint64_t>(r) * row_bytes, row);
    }
    for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(want[i], got[i]) << "row " << i / row_bytes << ", block " << (i % row_bytes) / 34 << ", byte "
                                   << i % 34;
    }
}

// Layer 0's K and V rows depend on the token's embedding only: the q8_0 cache must hold exactly the
// quantization of the f32 cache's rows, whether the tokens came in one batch or one at a time.
TEST(KvCacheQ8_0, RowsAreTheQuantizedRowsOfTheirTokenOnly) {
    auto model = Model::load(test::fixture_path("tiny/q_q8_0.gguf"));
    Evaluator evaluator(model, 2);
    const auto tokens = test::pseudo_random_tokens(70, model->n_vocab(), 5);
    State exact(*model, StateOptions{.kv_type = KvType::f32});
    evaluator.eval(exact, tokens);
    State whole(*model, StateOptions{.kv_type = KvType::q8_0});
    evaluator.eval(whole, tokens);
    State single(*model, StateOptions{.kv_type = KvType::q8_0});
    for (int32_t t : tokens) evaluator.eval(single, std::span<const int32_t>(&t, 1));
    KvCache& f32 = const_cast<KvCache&>(StateAccess::kv(exact));
    const int64_t width = f32.n_embd_kv();
    std::vector<uint8_t> want(tensor_row_bytes(TensorType::Q8_0, width));
    for (State* q8 : {&whole, &single}) {
        KvCache& kv = const_cast<KvCache&>(StateAccess::kv(*q8));
        ASSERT_EQ(TensorType::Q8_0, kv.type());
        ASSERT_EQ(want.size(), kv.row_bytes());
        for (int64_t pos = 0; pos < static_cast<int64_t>(tokens.size()); ++pos) {
            quantize_row_q8_0(reinterpret_cast<const float*>(f32.k_row(0, pos)), want.data(), width);
            ASSERT_EQ(0, std::memcmp(want.data(), kv.k_row(0, pos), want.size())) << "K, position " << pos;
            quantize_row_q8_0(reinterpret_cast<const float*>(f32.v_row(0, pos)), want.data(), width);
            ASSERT_EQ(0, std::memcmp(want.data(), kv.v_row(0, pos), want.size())) << "V, position " << pos;
        }
    }
    // 34 bytes per 32 values against f16's 64.
    State f16(*model, StateOptions{.kv_type = KvType::f16});
    evaluator.eval(f16, tokens);
    EXPECT_EQ(StateAccess::kv(whole).bytes() * 64, StateAccess::kv(f16).bytes() * 34);
    EXPECT_EQ(KvType::q8_0, whole.kv_type());
}

// The prefix cache keeps q8_0 blocks in their own domain (in RAM and in block files): a q8_0 request reuses
// only q8_0 blocks, an f16 request never does, and continuing from reused q8_0 blocks gives the one-pass bits.
TEST(KvCacheQ8_0, PrefixCacheReusesQ8_0BlocksExactlyAndOnlyForQ8_0) {
    auto model = Model::load(test::fixture_path("tiny/q_q8_0.gguf"));
    Evaluator evaluator(model, 1);
    const auto tokens = test::pseudo_random_tokens(100, model->n_vocab(), 9);
    const StateOptions q8_options{.kv_type = KvType::q8_0};
    State whole(*model, q8_options);
    evaluator.eval(whole, tokens);
    const auto dir = std::filesystem::temp_directory_path() / ("kvstash_q8_prefix_" + std::to_string(getpid()));
    for (bool disk : {false, true}) {
        SCOPED_TRACE(disk ? "disk tier" : "RAM");
        std::filesystem::remove_all(dir);
        PrefixCacheOptions options;
        if (disk) options.disk_dir = dir.string();
        auto cache = std::make_unique<PrefixCache>(*model, options);
        State first(*model, q8_options);
        evaluator.eval(first, std::span<const int32_t>(tokens.data(), 70));
        cache->release(first);
        // From disk: a new cache (empty RAM) over the same directory.
        if (disk) cache = std::make_unique<PrefixCache>(*model, options);
        EXPECT_EQ(0, cache->acquire(tokens, StateOptions{.kv_type = KvType::f16}).reused_tokens);
        CachedPrefix hit = cache->acquire(tokens, q8_options);
        ASSERT_EQ(64, hit.reused_tokens);
        EXPECT_EQ(KvType::q8_0, hit.state.kv_type());
        evaluator.eval(hit.state, std::span<const int32_t>(tokens).subspan(64));
        const auto want = whole.last_logits();
        const auto got = hit.state.last_logits();
        ASSERT_EQ(want.size(), got.size());
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
    }
    std::filesystem::remove_all(dir);
}

TEST(KvCacheQ8_0, StateRefusesAHeadSizeNotAMultipleOf32) {
    auto model = Model::load(test::fixture_path("tiny/gqa_f32.gguf"));  // head_dim 24
    try {
        State state(*model, StateOptions{.kv_type = KvType::q8_0});
        FAIL() << "a q8_0 cache of head size 24 was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(ErrorCode::invalid_argument, e.code());
        EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace kvstash
