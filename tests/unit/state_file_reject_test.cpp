// State files that must not load: every kind of damaged, foreign, newer or unknown file is refused with
// a precise Error; the model fingerprint binds a file to the weights and tokenizer, not to names.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "format/gguf.h"
#include "kvstash/state_file.h"
#include "model/model_access.h"
#include "state/fingerprint.h"
#include "support/gguf_builder.h"
#include "support/state_file_helpers.h"

namespace kvstash::test {
namespace {

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
        ErrorCode::bad_format, "n_evaluated 40 is outside [65, 65]");  // only recurrent states lag behind
    expect_error(
        [&] {
            decode(*model, patched([&](auto& b) {
                sf::store_le<int64_t>(&b[m + sf::meta::n_tokens], 65);
                sf::store_le<int64_t>(&b[m + sf::meta::n_evaluated], 65);
            }));
        },
        ErrorCode::bad_format, "section 'kv' holds");
    expect_error(
        [&] { decode(*model, patched([&](auto& b) { sf::store_le<int64_t>(&b[m + sf::meta::n_kv_layers], 1); })); },
        ErrorCode::bad_format, "section 'kv' holds");
    expect_error(
        [&] { decode(*model, patched([&](auto& b) { sf::store_le<uint8_t>(&b[m + sf::meta::reserved_v2 + 5], 1); })); },
        ErrorCode::bad_format, "non-zero reserved bytes");
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
    auto good = sf::encode_state_to_memory(state, SaveOptions{.compress = true});
    int compressed = 0;
    for (const Entry& e : entries(good)) {
        if (!e.compressed()) continue;
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
        [&] { decode(*model, edit([](auto& b) { sf::store_le<uint32_t>(&b[sf::header::format_version], 4); })); },
        ErrorCode::unsupported, "format version 4 is newer than this kvstash reads (1 to 3)");
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
    EXPECT_EQ(fp, compute_model_fingerprint(*ModelAccess::impl(*model).file).hex());

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

}  // namespace
}  // namespace kvstash::test
