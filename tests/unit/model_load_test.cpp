// Model::load on tiny Llama GGUFs written by GgufBuilder: each kind of broken file fails with the right
// ErrorCode and a message naming what is wrong; a valid one loads and evaluates. Evaluator::eval
// errors leave the State unchanged; fork and truncate keep results bitwise reproducible.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "model/config.h"
#include "model/model_access.h"
#include "support/gguf_builder.h"

namespace kvstash {
namespace {

using test::GgufBuilder;
namespace gv = test::gv;

constexpr int64_t kEmbd = 32, kFf = 64, kVocab = 48, kLayers = 2, kCtx = 64;
constexpr uint32_t kRawQ5_1 = 7;  // ggml type number of q5_1, which kvstash does not support

// A tiny Llama (2 layers, 32 wide, 4 heads of 8, GQA 4/2, vocabulary 48) with random f32 weights, and
// knobs that break it in one specific way.
struct TinyLlama {
    std::string arch = "llama";
    int64_t n_head = 4, n_head_kv = 2;
    std::string omit_key, omit_tensor;
    std::string reshape_tensor;  // written with reshape_dims instead of its proper shape
    std::vector<uint64_t> reshape_dims;
    std::string q5_1_tensor;  // written with the (unsupported) q5_1 type
    uint32_t context_length = kCtx;

    std::vector<uint8_t> build() const {
        GgufBuilder b;
        auto key = [&](const std::string& k, gguf::Value v) {
            if (k != omit_key) b.add(k, std::move(v));
        };
        key("general.architecture", gv::string(arch));
        key("general.name", gv::string("tiny-test"));
        key("llama.block_count", gv::u32(kLayers));
        key("llama.embedding_length", gv::u32(kEmbd));
        key("llama.feed_forward_length", gv::u32(kFf));
        key("llama.attention.head_count", gv::u32(static_cast<uint32_t>(n_head)));
        key("llama.attention.head_count_kv", gv::u32(static_cast<uint32_t>(n_head_kv)));
        key("llama.context_length", gv::u32(context_length));
        key("llama.attention.layer_norm_rms_epsilon", gv::f32(1e-5f));
        key("llama.rope.freq_base", gv::f32(10000.0f));

        std::mt19937 rng(42);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        auto tensor = [&](const std::string& name, std::vector<uint64_t> dims, float sigma, float mean) {
            if (name == omit_tensor) return;
            if (name == reshape_tensor) dims = reshape_dims;
            uint64_t n = 1;
            for (uint64_t d : dims) n *= d;
            if (name == q5_1_tensor) {  // 24-byte blocks of 32 elements, contents irrelevant
                b.add_tensor(name, kRawQ5_1, dims, std::vector<uint8_t>(n / 32 * 24, 0));
                return;
            }
            std::vector<float> values(n);
            for (float& v : values) v = mean + sigma * normal(rng);
            b.add_f32_tensor(name, dims, values);
        };
        const auto head_dim = static_cast<uint64_t>(kEmbd / n_head);
        const uint64_t q_width = static_cast<uint64_t>(n_head) * head_dim;
        const uint64_t kv_width = static_cast<uint64_t>(n_head_kv) * head_dim;
        tensor("token_embd.weight", {kEmbd, kVocab}, 1.0f, 0.0f);
        tensor("output_norm.weight", {kEmbd}, 0.1f, 1.0f);
        tensor("output.weight", {kEmbd, kVocab}, 0.3f, 0.0f);
        for (int il = 0; il < kLayers; ++il) {
            const std::string p = "blk." + std::to_string(il) + ".";
            tensor(p + "attn_norm.weight", {kEmbd}, 0.1f, 1.0f);
            tensor(p + "attn_q.weight", {kEmbd, q_width}, 0.3f, 0.0f);
            tensor(p + "attn_k.weight", {kEmbd, kv_width}, 0.3f, 0.0f);
            tensor(p + "attn_v.weight", {kEmbd, kv_width}, 0.3f, 0.0f);
            tensor(p + "attn_output.weight", {q_width, kEmbd}, 0.2f, 0.0f);
            tensor(p + "ffn_norm.weight", {kEmbd}, 0.1f, 1.0f);
            tensor(p + "ffn_gate.weight", {kEmbd, kFf}, 0.2f, 0.0f);
            tensor(p + "ffn_up.weight", {kEmbd, kFf}, 0.2f, 0.0f);
            tensor(p + "ffn_down.weight", {kFf, kEmbd}, 0.2f, 0.0f);
        }
        return b.build();
    }
};

std::string temp_path(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / ("kvstash_model_load_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    return (dir / name).string();
}

std::string write_file(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = temp_path(name);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + path);
    return path;
}

// Loading a file of `bytes` must throw Error(code) whose message contains every needle.
void expect_load_error(const std::string& name, const std::vector<uint8_t>& bytes, ErrorCode code,
                       const std::vector<std::string>& needles) {
    const std::string path = write_file(name + ".gguf", bytes);
    try {
        Model::load(path);
        ADD_FAILURE() << name << ": loaded without error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << name << ": " << e.what();
        for (const std::string& needle : needles) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
                << name << ": message does not mention '" << needle << "': " << e.what();
        }
    }
}

class ModelLoadTest : public ::testing::Test {
protected:
    static void TearDownTestSuite() {
        std::error_code ignored;
        std::filesystem::remove_all(std::filesystem::path(temp_path("x")).parent_path(), ignored);
    }
};

// Issue 34, item 9: a context_length of 0 or 2^32-1 sized every default context (a server with n_ctx 0, or
// one that tried to reserve 4 billion positions): refused as the broken file it is.
TEST_F(ModelLoadTest, ContextLengthOutOfRangeIsRefused) {
    for (const uint32_t n : {0u, 0xFFFFFFFFu}) {
        TinyLlama spec;
        spec.context_length = n;
        expect_load_error("ctx_" + std::to_string(n), spec.build(), ErrorCode::bad_format,
                          {"context_length " + std::to_string(n), "outside 1.."});
    }
}

TEST_F(ModelLoadTest, MissingTensorIsNamed) {
    for (const std::string name : {"blk.1.ffn_up.weight", "output_norm.weight", "token_embd.weight"}) {
        TinyLlama spec;
        spec.omit_tensor = name;
        expect_load_error("missing_tensor", spec.build(), ErrorCode::bad_format, {"'" + name + "'"});
    }
}

TEST_F(ModelLoadTest, WrongShapeShowsExpectedAndActual) {
    TinyLlama spec;
    spec.reshape_tensor = "blk.1.attn_k.weight";
    spec.reshape_dims = {kEmbd, kEmbd};  // K projection is n_embd -> n_head_kv·head_dim = 16
    expect_load_error("wrong_shape_matrix", spec.build(), ErrorCode::bad_format,
                      {"blk.1.attn_k.weight", "{32, 32}", "expected {32, 16}"});
    spec.reshape_tensor = "blk.0.ffn_norm.weight";
    spec.reshape_dims = {kEmbd, 2};
    expect_load_error("wrong_shape_vector", spec.build(), ErrorCode::bad_format,
                      {"blk.0.ffn_norm.weight", "{32, 2}", "expected {32}"});
}

// Trailing dimensions of 1 do not count (as in llama.cpp, whose quantizer drops them: the converter's
// ssm_norm {2048, 1} comes back as {2048}).
TEST_F(ModelLoadTest, TrailingDimensionsOfOneAreTheSameShape) {
    TinyLlama spec;
    spec.reshape_tensor = "blk.0.ffn_norm.weight";
    spec.reshape_dims = {kEmbd, 1};
    EXPECT_NO_THROW(Model::load(write_file("trailing_one.gguf", spec.build())));
}

TEST_F(ModelLoadTest, UnsupportedArchitectureIsNamed) {
    TinyLlama spec;
    spec.arch = "falcon";
    expect_load_error("falcon", spec.build(), ErrorCode::unsupported, {"'falcon'"});
}

TEST_F(ModelLoadTest, HeadCountNotAMultipleOfKvHeads) {
    TinyLlama spec;
    spec.n_head_kv = 3;
    expect_load_error("heads", spec.build(), ErrorCode::bad_format, {"head_count 4", "head_count_kv 3"});
}

TEST_F(ModelLoadTest, MissingRequiredKeyIsNamed) {
    for (const std::string key : {"general.architecture", "llama.block_count", "llama.embedding_length",
                                  "llama.attention.head_count", "llama.attention.layer_norm_rms_epsilon"}) {
        TinyLlama spec;
        spec.omit_key = key;
        expect_load_error("missing_key", spec.build(), ErrorCode::bad_format, {key});
    }
}

TEST_F(ModelLoadTest, UnsupportedTensorTypeNamesTensorAndType) {
    TinyLlama spec;
    spec.q5_1_tensor = "blk.0.attn_q.weight";
    expect_load_error("q5_1", spec.build(), ErrorCode::unsupported, {"blk.0.attn_q.weight", "q5_1"});
}

TEST_F(ModelLoadTest, TruncatedFileIsBadFormat) {
    const std::vector<uint8_t> full = TinyLlama().build();
    for (size_t keep : {size_t{0}, size_t{3}, size_t{20}, size_t{200}, full.size() / 2, full.size() - 1}) {
        SCOPED_TRACE("kept " + std::to_string(keep) + " of " + std::to_string(full.size()) + " bytes");
        expect_load_error("truncated",
                          std::vector<uint8_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(keep)),
                          ErrorCode::bad_format, {});
    }
}

TEST_F(ModelLoadTest, MissingFileIsIo) {
    try {
        Model::load(temp_path("does_not_exist.gguf"));
        ADD_FAILURE() << "loaded a missing file";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::io) << e.what();
    }
}

// ------------------------------------------------------------------------------ a valid model evaluates

class TinyModelEval : public ModelLoadTest {
protected:
    static void SetUpTestSuite() { model_ = Model::load(write_file("valid.gguf", TinyLlama().build())); }
    static void TearDownTestSuite() {
        model_.reset();
        ModelLoadTest::TearDownTestSuite();
    }

    static std::vector<int32_t> tokens(int64_t n, uint32_t seed) {
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(kVocab - 1));
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (int32_t& x : t) x = id(rng);
        return t;
    }
    static std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    }
    // Last logits of `toks` evaluated in one call on a fresh state.
    std::vector<float> fresh_logits(const std::vector<int32_t>& toks, StateOptions options = {}) {
        State s(*model_, options);
        eval_.eval(s, toks);
        return {s.last_logits().begin(), s.last_logits().end()};
    }
    static std::vector<float> copy(std::span<const float> v) { return {v.begin(), v.end()}; }
    static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    }

    static std::shared_ptr<const Model> model_;
    Evaluator eval_{model_, 1};
};
std::shared_ptr<const Model> TinyModelEval::model_;

TEST_F(TinyModelEval, LoadsAndEvaluates) {
    const ModelConfig& c = ModelAccess::impl(*model_).config;
    EXPECT_EQ(c.n_layer, kLayers);
    EXPECT_EQ(c.n_head, 4);
    EXPECT_EQ(c.n_head_kv, 2);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(model_->n_vocab(), kVocab);
    EXPECT_EQ(model_->n_ctx_train(), kCtx);
    EXPECT_FALSE(c.tied_output);

    State state(*model_);
    EXPECT_TRUE(state.last_logits().empty());
    const std::vector<int32_t> toks = {1, 7, 30, 47, 0};
    std::vector<float> all;
    eval_.eval(state, toks, &all);
    ASSERT_EQ(state.n_tokens(), 5);
    ASSERT_EQ(state.last_logits().size(), static_cast<size_t>(kVocab));
    ASSERT_EQ(all.size(), static_cast<size_t>(5 * kVocab));
    EXPECT_EQ(0, std::memcmp(all.data() + 4 * kVocab, state.last_logits().data(), kVocab * sizeof(float)));
    for (float v : all) ASSERT_TRUE(std::isfinite(v));
    // Not degenerate: positions with different tokens have different logits.
    EXPECT_NE(0, std::memcmp(all.data(), all.data() + kVocab, kVocab * sizeof(float)));
}

TEST_F(TinyModelEval, OutOfVocabularyTokenLeavesStateUnchanged) {
    const std::vector<int32_t> prefix = tokens(5, 1), suffix = tokens(3, 2);
    State state(*model_);
    eval_.eval(state, prefix);
    const std::vector<float> before = copy(state.last_logits());
    for (const std::vector<int32_t>& bad : {std::vector<int32_t>{4, static_cast<int32_t>(kVocab), 5},
                                            std::vector<int32_t>{-1}, std::vector<int32_t>{3, 3, 1 << 30}}) {
        try {
            eval_.eval(state, bad);
            ADD_FAILURE() << "an out-of-vocabulary id was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
        }
        EXPECT_EQ(state.n_tokens(), 5);
        EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), state.tokens().begin(), state.tokens().end()));
        EXPECT_TRUE(same_bits(copy(state.last_logits()), before));
    }
    eval_.eval(state, suffix);
    EXPECT_TRUE(same_bits(copy(state.last_logits()), fresh_logits(concat(prefix, suffix))));
}

TEST_F(TinyModelEval, BeyondContextLeavesStateUnchanged) {
    const StateOptions options{KvType::f16, 8};
    const std::vector<int32_t> all = tokens(8, 3);
    const std::vector<int32_t> first(all.begin(), all.begin() + 5), rest(all.begin() + 5, all.end());
    State state(*model_, options);
    eval_.eval(state, first);
    const std::vector<float> before = copy(state.last_logits());
    for (int64_t n : {4, 40}) {
        try {
            eval_.eval(state, tokens(n, 4));
            ADD_FAILURE() << "evaluated past n_ctx 8";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::out_of_range) << e.what();
        }
        EXPECT_EQ(state.n_tokens(), 5);
        EXPECT_TRUE(std::equal(first.begin(), first.end(), state.tokens().begin(), state.tokens().end()));
        EXPECT_TRUE(same_bits(copy(state.last_logits()), before));
    }
    eval_.eval(state, rest);  // exactly fills the context
    EXPECT_EQ(state.n_tokens(), 8);
    EXPECT_TRUE(same_bits(copy(state.last_logits()), fresh_logits(all, options)));
}

// The fork starts mid-block (35 = 32 + 3): both sides then write into the shared, partly filled block.
TEST_F(TinyModelEval, ForkLeavesParentResultsBitwiseUnchanged) {
    const std::vector<int32_t> prefix = tokens(35, 5), fork_tail = tokens(6, 6), parent_tail = tokens(9, 7);
    State reference(*model_);  // never forked
    eval_.eval(reference, prefix);
    std::vector<float> expected;
    eval_.eval(reference, parent_tail, &expected);

    State parent(*model_);
    eval_.eval(parent, prefix);
    State child = parent.fork();
    EXPECT_EQ(child.n_tokens(), 35);
    EXPECT_TRUE(same_bits(copy(child.last_logits()), copy(parent.last_logits())));
    eval_.eval(child, fork_tail);
    std::vector<float> got;
    eval_.eval(parent, parent_tail, &got);
    EXPECT_TRUE(same_bits(got, expected)) << "the fork's writes reached the parent";
    EXPECT_EQ(parent.n_tokens(), 44);

    // And the other way round: the parent's writes did not reach the fork.
    const std::vector<int32_t> more = tokens(4, 8);
    eval_.eval(child, more);
    EXPECT_TRUE(same_bits(copy(child.last_logits()), fresh_logits(concat(concat(prefix, fork_tail), more))));
}

TEST_F(TinyModelEval, TruncateThenReevaluateIsBitwiseIdentical) {
    const std::vector<int32_t> toks = tokens(40, 9);
    State state(*model_);
    std::vector<float> original;
    eval_.eval(state, toks, &original);
    for (int64_t n : {39, 33, 32, 20, 0}) {
        SCOPED_TRACE("truncate to " + std::to_string(n));
        state.truncate(n);
        EXPECT_EQ(state.n_tokens(), n);
        EXPECT_TRUE(state.last_logits().empty());
        std::vector<float> again;
        eval_.eval(state, std::span<const int32_t>(toks).subspan(static_cast<size_t>(n)), &again);
        const std::vector<float> expected(original.begin() + n * kVocab, original.end());
        EXPECT_TRUE(same_bits(again, expected));
    }
    // Truncating a fork into the shared prefix and re-evaluating other tokens leaves the parent alone.
    State child = state.fork();
    child.truncate(10);
    eval_.eval(child, tokens(20, 10));
    state.truncate(30);
    std::vector<float> again;
    eval_.eval(state, std::span<const int32_t>(toks).subspan(30), &again);
    EXPECT_TRUE(same_bits(again, std::vector<float>(original.begin() + 30 * kVocab, original.end())));
}

}  // namespace
}  // namespace kvstash
