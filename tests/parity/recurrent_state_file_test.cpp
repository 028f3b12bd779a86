// State files (format version 2) of models with recurrent layers (Mamba-1, Mamba-2, granitehybrid):
// prefill -> save -> load -> continue gives the one-pass logits bitwise at every continued position;
// save -> load -> save is byte-identical; tokens waiting for re-evaluation after a truncate and the
// checkpoints survive; a q8_0 KV encoding leaves the recurrent part exact; damaged recurrent sections
// and other weights are refused. Models: tests/fixtures/recurrent/*.gguf.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "format/gguf.h"
#include "kvstash/state_file.h"
#include "support/state_file_helpers.h"

namespace kvstash::test {
namespace {

std::vector<std::string> recurrent_models() {
    std::vector<std::string> out;
    for (const std::string& json : fixture_files("recurrent", ".json")) {
        const std::string model = load_json(json).at("model").get<std::string>();
        // One file per architecture (the q8_0 weights behave the same for state files).
        if (model.find("_f32") != std::string::npos) out.push_back(fixture_path("recurrent/" + model));
    }
    return out;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

bool same_floats(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}

// The recurrent state and every checkpoint, bitwise.
void expect_same_recurrent(const State& want, const State& got) {
    EXPECT_TRUE(same_floats(StateAccess::recurrent(want).floats(), StateAccess::recurrent(got).floats()))
        << "recurrent state differs";
    EXPECT_EQ(want.checkpoint_positions(), got.checkpoint_positions());
    const auto& a = StateAccess::checkpoints(want);
    const auto& b = StateAccess::checkpoints(got);
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        EXPECT_TRUE(same_floats(a[i].state.floats(), b[i].state.floats())) << "checkpoint " << a[i].pos;
    }
    EXPECT_EQ(want.n_pending(), got.n_pending());
    EXPECT_EQ(StateAccess::n_evaluated(want), StateAccess::n_evaluated(got));
}

StateOptions options_with(KvType kv_type, int64_t checkpoint_interval) {
    StateOptions options;
    options.kv_type = kv_type;
    options.n_ctx = 512;
    options.checkpoint_interval = checkpoint_interval;
    return options;
}

class RecurrentStateFile : public StateFileTest {
protected:
    void SetUp() override {
        StateFileTest::SetUp();
        paths_ = recurrent_models();
        ASSERT_GE(paths_.size(), 3u) << "expected the recurrent fixtures of tests/reference/make_recurrent_models.py";
    }
    std::vector<std::string> paths_;
};

TEST_F(RecurrentStateFile, PrefillSaveLoadContinueIsOnePassBitwise) {
    for (const std::string& model_path : paths_) {
        auto model = Model::load(model_path);
        const int64_t V = model->n_vocab();
        Evaluator evaluator(model, 2);
        const auto all = pseudo_random_tokens(90, V, 21);
        for (KvType kv_type : {KvType::f32, KvType::f16}) {
            State one_pass(*model, options_with(kv_type, 0));
            std::vector<float> want;
            evaluator.eval(one_pass, all, &want);
            for (bool compress : {false, true}) {
                SCOPED_TRACE(model_path + (kv_type == KvType::f16 ? " f16" : " f32") + (compress ? " zstd" : ""));
                State prefix(*model, options_with(kv_type, 16));
                evaluator.eval(prefix, std::span(all).first(50));
                prefix.set_sampler_state(some_sampler(V));
                save_state(prefix, path("r.kvs"), SaveOptions{.compress = compress});
                State loaded = load_state(*model, path("r.kvs"));
                expect_same_state(prefix, loaded);
                expect_same_recurrent(prefix, loaded);
                EXPECT_EQ(loaded.checkpoint_positions(), (std::vector<int64_t>{16, 32, 48}));
                const StateFileInfo info = inspect_state_file(path("r.kvs"), Checksums::verify);
                EXPECT_TRUE(info.checksums_ok) << info.checksum_error;
                EXPECT_EQ(info.checkpoint_positions, (std::vector<int64_t>{16, 32, 48}));
                EXPECT_EQ(info.n_recurrent_layers, model->info().n_recurrent_layers);
                std::vector<uint8_t> file = read_file(path("r.kvs"));
                // zstd pays on these floats: the positions are read through the decompressor.
                EXPECT_EQ(entry_of(file, sf::kSectionCheckpoints).compressed(), compress);
                EXPECT_TRUE(StateAccess::kv_exact(loaded));
                // save -> load -> save: the same bytes.
                EXPECT_TRUE(read_file(path("r.kvs")) == sf::encode_state_to_memory(loaded, {.compress = compress}));

                std::vector<float> got;
                evaluator.eval(loaded, std::span(all).subspan(50), &got);
                ASSERT_EQ(got.size(), static_cast<size_t>(40 * V));
                EXPECT_TRUE(same_bits(want.data() + 50 * V, got.data(), got.size()));
                // The checkpoint interval was saved too: the continuation checkpoints as the original would.
                evaluator.eval(prefix, std::span(all).subspan(50));
                EXPECT_EQ(loaded.checkpoint_positions(), prefix.checkpoint_positions());
            }
        }
    }
}

TEST_F(RecurrentStateFile, PendingTokensAndCheckpointsSurvive) {
    for (const std::string& model_path : paths_) {
        SCOPED_TRACE(model_path);
        auto model = Model::load(model_path);
        const int64_t V = model->n_vocab();
        Evaluator evaluator(model, 2);
        const auto all = pseudo_random_tokens(60, V, 8);
        State one_pass(*model, options_with(KvType::f32, 0));
        std::vector<float> want;
        evaluator.eval(one_pass, all, &want);

        State state(*model, options_with(KvType::f32, 8));
        evaluator.eval(state, std::span(all).first(40));
        state.truncate(29);  // checkpoint 24 restored, tokens 24..28 wait
        ASSERT_EQ(state.n_pending(), 5);
        const auto bytes = sf::encode_state_to_memory(state);
        State loaded = decode(*model, bytes);
        expect_same_state(state, loaded);
        expect_same_recurrent(state, loaded);
        EXPECT_EQ(loaded.n_pending(), 5);
        EXPECT_EQ(loaded.checkpoint_positions(), (std::vector<int64_t>{8, 16, 24}));
        EXPECT_EQ(bytes, sf::encode_state_to_memory(loaded));
        const StateFileInfo info = sf::inspect_state_bytes(bytes, "p.kvs", Checksums::verify);
        EXPECT_EQ(info.n_tokens, 29);
        EXPECT_EQ(info.n_evaluated, 24);
        EXPECT_EQ(info.checkpoint_positions, (std::vector<int64_t>{8, 16, 24}));
        EXPECT_EQ(info.recurrent_state_bytes, model->info().recurrent_state_bytes);

        State checkpointed = loaded.fork();
        std::vector<float> got;
        evaluator.eval(loaded, std::span(all).subspan(29), &got);
        EXPECT_EQ(loaded.n_pending(), 0);
        ASSERT_EQ(got.size(), static_cast<size_t>(31 * V));
        EXPECT_TRUE(same_bits(want.data() + 29 * V, got.data(), got.size()));

        // A checkpoint that came from the file: truncating to it re-evaluates nothing.
        checkpointed.truncate(16);
        EXPECT_EQ(checkpointed.n_pending(), 0);
        evaluator.eval(checkpointed, std::span(all).subspan(16, 20), &got);
        EXPECT_TRUE(same_bits(want.data() + 16 * V, got.data(), got.size()));
    }
}

TEST_F(RecurrentStateFile, Q8KvEncodingLeavesTheRecurrentStateExact) {
    for (const std::string& model_path : paths_) {
        SCOPED_TRACE(model_path);
        auto model = Model::load(model_path);
        Evaluator evaluator(model, 2);
        State state(*model, options_with(KvType::f16, 10));
        evaluator.eval(state, pseudo_random_tokens(45, model->n_vocab(), 31));
        const auto bytes = sf::encode_state_to_memory(state, {.file_kv_type = KvType::q8_0});
        const State loaded = decode(*model, bytes);
        expect_same_recurrent(state, loaded);
        const StateFileInfo info = sf::inspect_state_bytes(bytes, "q8.kvs", Checksums::verify);
        EXPECT_EQ(info.kv_type, KvType::q8_0);
        EXPECT_EQ(info.checkpoint_positions, (std::vector<int64_t>{10, 20, 30, 40}));
        if (model->info().n_kv_layers > 0) {
            EXPECT_LT(info.kv_bytes, StateAccess::kv(state).n_blocks() * StateAccess::kv(state).block_bytes());
        }
    }
}

TEST_F(RecurrentStateFile, DamagedRecurrentSectionsAreRefused) {
    for (const std::string& model_path : paths_) {
        SCOPED_TRACE(model_path);
        auto model = Model::load(model_path);
        Evaluator evaluator(model, 1);
        State state(*model, options_with(KvType::f32, 12));
        evaluator.eval(state, pseudo_random_tokens(40, model->n_vocab(), 5));
        std::vector<uint8_t> good = sf::encode_state_to_memory(state);
        for (uint32_t type : {sf::kSectionRecurrent, sf::kSectionCheckpoints}) {
            const Entry e = entry_of(good, type);
            ASSERT_GT(e.stored_bytes, 0u);
            // Any byte: the first, the last and ~300 between.
            std::vector<uint64_t> offsets;
            for (uint64_t at = 0; at < e.stored_bytes; at += std::max<uint64_t>(1, e.stored_bytes / 300))
                offsets.push_back(at);
            offsets.push_back(e.stored_bytes - 1);
            for (uint64_t at : offsets) {
                auto flipped = good;
                flipped[e.offset + at] ^= 0x01;
                expect_error([&] { decode(*model, flipped); }, ErrorCode::bad_format,
                             "checksum mismatch in section '" + sf::section_name(type) + "'");
            }
        }
        auto patched = [&](auto&& edit) {
            auto b = good;
            edit(b);
            sf::rewrite_checksums(b);
            return b;
        };
        const uint64_t m = entry_of(good, sf::kSectionMeta).offset;
        const uint64_t c = entry_of(good, sf::kSectionCheckpoints).offset;
        // Shapes the sections do not have, checkpoints out of order, a required section hidden.
        expect_error(
            [&] { decode(*model, patched([&](auto& b) { sf::store_le<int64_t>(&b[m + sf::meta::conv_floats], 1); })); },
            ErrorCode::bad_format, "section 'recurrent' holds");
        expect_error(
            [&] {
                decode(*model, patched([&](auto& b) { sf::store_le<int64_t>(&b[m + sf::meta::n_checkpoints], 2); }));
            },
            ErrorCode::bad_format, "section 'checkpoints' holds");
        expect_error(
            [&] {
                decode(*model, patched([&](auto& b) { sf::store_le<int64_t>(&b[m + sf::meta::n_evaluated], 41); }));
            },
            ErrorCode::bad_format, "n_evaluated 41 is outside");
        expect_error([&] { decode(*model, patched([&](auto& b) { sf::store_le<int64_t>(&b[c + 8], 12); })); },
                     ErrorCode::bad_format, "checkpoint 1 is at position 12");
        expect_error([&] { decode(*model, patched([&](auto& b) { sf::store_le<int64_t>(&b[c], 0); })); },
                     ErrorCode::bad_format, "checkpoint 0 is at position 0");
        const Entry rec = entry_of(good, sf::kSectionRecurrent);
        expect_error(
            [&] {
                decode(*model, patched([&](auto& b) {
                    sf::store_le<uint32_t>(rec.at - good.data() + b.data() + sf::entry::type, 0x8000'0006u);
                }));
            },
            ErrorCode::bad_format, "required section 'recurrent' is missing");
    }
}

// A small in-process fuzz of the version 2 sections (tests/fuzz/state_file_fuzz.cpp is the libFuzzer
// one): random bytes changed, checksums left wrong or made right again; every result loads or raises
// kvstash::Error, and what loads saves, loads and saves again to the same bytes.
TEST_F(RecurrentStateFile, RandomlyDamagedFilesLoadOrFailCleanly) {
    for (const std::string& model_path : paths_) {
        SCOPED_TRACE(model_path);
        auto model = Model::load(model_path);
        Evaluator evaluator(model, 1);
        State state(*model, options_with(KvType::f16, 6));
        evaluator.eval(state, pseudo_random_tokens(20, model->n_vocab(), 17));
        state.truncate(15);
        for (bool compress : {false, true}) {
            const auto good = sf::encode_state_to_memory(state, {.compress = compress});
            std::mt19937_64 rng(compress ? 2 : 1);
            int loaded = 0;
            for (int i = 0; i < 600; ++i) {
                auto bytes = good;
                // Mostly the meta, recurrent and checkpoints sections and the table: where version 2 differs.
                for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) {
                    const size_t at =
                        rng() % 2 == 0 ? rng() % std::min<size_t>(bytes.size(), 1024) : rng() % bytes.size();
                    bytes[at] = static_cast<uint8_t>(rng());
                }
                if (i % 2 == 0) sf::rewrite_checksums(bytes);
                try {
                    const State s = decode(*model, bytes);
                    ++loaded;
                    const auto again = sf::encode_state_to_memory(s);
                    ASSERT_EQ(again, sf::encode_state_to_memory(decode(*model, again))) << "mutation " << i;
                } catch (const Error&) {}
            }
            EXPECT_LT(loaded, 600);
        }
    }
}

// Writes a copy of `src` with one byte of one tensor's data flipped.
std::string with_one_weight_byte_flipped(const std::string& src, const std::string& dst) {
    std::filesystem::copy_file(src, dst, std::filesystem::copy_options::overwrite_existing);
    auto file = gguf::File::open(src);
    const gguf::TensorInfo& t = file->tensors().back();
    const uint64_t at = file->data_offset() + t.offset + t.n_bytes / 2;
    auto bytes = read_file(dst);
    bytes.at(at) ^= 0x01;
    write_file(dst, bytes);
    return dst;
}

TEST_F(RecurrentStateFile, OtherWeightsAreRefused) {
    std::string hybrid;
    for (const std::string& p : paths_) {
        if (p.find("granitehybrid") != std::string::npos) hybrid = p;
    }
    ASSERT_FALSE(hybrid.empty());
    auto model = Model::load(hybrid);
    auto changed = Model::load(with_one_weight_byte_flipped(hybrid, path("changed.gguf")));
    ASSERT_NE(model_fingerprint(*model), model_fingerprint(*changed));
    Evaluator evaluator(model, 1);
    State state(*model, options_with(KvType::f16, 8));
    evaluator.eval(state, pseudo_random_tokens(20, model->n_vocab(), 4));
    save_state(state, path("h.kvs"));
    EXPECT_EQ(load_state(*model, path("h.kvs")).n_tokens(), 20);
    expect_error([&] { load_state(*changed, path("h.kvs")); }, ErrorCode::invalid_argument,
                 "load it with the model it was saved from");
    // And a state of one architecture is not loaded into another.
    for (const std::string& p : paths_) {
        if (p != hybrid) {
            expect_error([&] { load_state(*Model::load(p), path("h.kvs")); }, ErrorCode::invalid_argument,
                         "fingerprint");
        }
    }
}

}  // namespace
}  // namespace kvstash::test
