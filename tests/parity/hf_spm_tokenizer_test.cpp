// SentencePiece-style tokenizer.json (BPE with byte fallback: Gemma's, Llama 2's, Metaspace) in a model directory,
// against Hugging Face `tokenizers` on the fixtures of tests/reference/make_hf_spm_tokenizer.py
// (tests/fixtures/hf/spm/): five normalizer / pre-tokenizer / decoder forms over one vocabulary and its merges; two of
// them in tiny random-weight directories (gemma3 bf16 with Gemma 3's chat template, llama f32) whose logits are checked
// against transformers fp32. With KVSTASH_GEMMA_TOKENIZER_DIR set, also Gemma 3's real vocabulary
// (tests/reference/check_gemma_tokenizer_json.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "format/gguf.h"
#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "kvstash/tokenizer.h"
#include "model/model_access.h"
#include "state/fingerprint.h"
#include "support/eval_helpers.h"
#include "support/paths.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/vocabulary.h"
#include "tokenizer/vocabulary_hf.h"

namespace kvstash::test {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;
namespace fs = std::filesystem;

const json& fixture() {
    static const json j = load_json(fixture_path("hf/spm/spm_tokenizers.json"));
    return j;
}

// The `tokenizer.*` metadata a model directory gets from `tokenizer_json` (tokenizer_config.json and config.json
// beside it when present), as a metadata-only gguf::File.
std::unique_ptr<gguf::File> tokenizer_file(const std::string& tokenizer_json, const json& tok_override = json()) {
    const fs::path dir = fs::path(tokenizer_json).parent_path();
    const json tok = tok_override.is_null() ? load_json(tokenizer_json) : tok_override;
    std::optional<json> tcfg;
    if (fs::exists(dir / "tokenizer_config.json")) tcfg = load_json((dir / "tokenizer_config.json").string());
    const json config = fs::exists(dir / "config.json") ? load_json((dir / "config.json").string()) : json::object();
    return gguf::File::assemble(
        tokenizer_json, tokenizer_metadata_from_hf(tok, tcfg ? &*tcfg : nullptr, config, std::nullopt, tokenizer_json),
        {}, {}, nullptr, 0);
}

Tokenizer tokenizer_of(const std::string& tokenizer_json) {
    return make_tokenizer(vocabulary_from_gguf(*tokenizer_file(tokenizer_json)));
}

std::string source_path(const json& form) { return source_dir() + "/" + form.at("tokenizer").get<std::string>(); }

TEST(HfSpmTokenizer, EveryFormMatchesTokenizers) {
    const int32_t bos = fixture().at("bos").get<int32_t>();
    for (const json& form : fixture().at("forms")) {
        const std::string name = form.at("form").get<std::string>();
        SCOPED_TRACE(name);
        const Tokenizer tok = tokenizer_of(source_path(form));
        EXPECT_EQ(tok.n_vocab(), form.at("n_vocab").get<int32_t>());
        EXPECT_EQ(tok.bos(), bos);
        size_t n = 0, wrong = 0;
        for (const json& c : fixture().at("cases")) {
            if (c.at("form") != name) continue;
            ++n;
            const std::string text = c.at("text").get<std::string>();
            const Ids ids = c.at("ids").get<Ids>();
            const Ids ours = tok.encode(text, AddSpecial::no, ParseSpecial::yes);
            Ids with_bos{bos};
            with_bos.insert(with_bos.end(), ids.begin(), ids.end());
            const std::string decoded = c.value("decoded", text);
            if (ours != ids || tok.encode(text, AddSpecial::yes, ParseSpecial::yes) != with_bos ||
                tok.decode(ids) != decoded) {
                if (++wrong <= 5) {
                    ADD_FAILURE() << "text '" << text << "': ids " << ::testing::PrintToString(ours) << " expected "
                                  << ::testing::PrintToString(ids) << "; decoded '" << tok.decode(ids) << "' expected '"
                                  << decoded << "'";
                }
            }
        }
        std::printf("%s: %zu texts, %zu differ from tokenizers\n", name.c_str(), n, wrong);
        EXPECT_GT(n, 100u);
        EXPECT_EQ(wrong, 0u);
    }
}

TEST(HfSpmTokenizer, DirectoryLogitsMatchTransformers) {
    constexpr double kUnit = 0x1p-24;
    for (const json& m : fixture().at("models")) {
        const std::string name = m.at("name").get<std::string>();
        SCOPED_TRACE(name);
        auto model = Model::load(fixture_path("hf/spm/" + name));
        const auto V = static_cast<size_t>(model->n_vocab());
        const int64_t n_ff = ModelAccess::impl(*model).config.n_ff;
        for (size_t s = 0; s < m.at("sequences").size(); ++s) {
            const auto tokens = m.at("sequences")[s].get<Ids>();
            const auto& ref = m.at("logits")[s];
            // The tolerance of tests/parity/hf_dir_test.cpp.
            const double bound = 4.0 * (static_cast<double>(n_ff) + 8.0 * static_cast<double>(tokens.size())) * kUnit;
            const auto ours = eval_logits(model, tokens, {static_cast<int64_t>(tokens.size())}, 2, KvType::f32);
            ASSERT_EQ(ours.size(), tokens.size() * V);
            const double worst = worst_row_relative_error(ref, ours, V);
            std::printf("%s sequence %zu: max |ours - transformers| / max|ref| = %.3g (bound %.3g)\n", name.c_str(), s,
                        worst, bound);
            EXPECT_LE(worst, bound);
        }
        // The directory's own tokenizer is the fixture's (a model directory reads it the same way).
        const Tokenizer& tok = model->tokenizer();
        EXPECT_EQ(tok.encode("<start_of_turn>user\nHi<end_of_turn>", AddSpecial::no, ParseSpecial::yes),
                  tokenizer_of(fixture_path("hf/spm/" + name + "/tokenizer.json"))
                      .encode("<start_of_turn>user\nHi<end_of_turn>", AddSpecial::no, ParseSpecial::yes));
    }
}

// Gemma 3's chat template from tokenizer_config.json is recognised, renders as transformers' apply_chat_template,
// and the rendered prompt tokenizes to transformers' ids.
TEST(HfSpmTokenizer, GemmaChatTemplateFromTokenizerConfig) {
    const json& m = fixture().at("models")[0];
    ASSERT_TRUE(m.contains("chat"));
    auto model = Model::load(fixture_path("hf/spm/" + m.at("name").get<std::string>()));
    const ChatTemplate tmpl = ChatTemplate::for_model(*model);
    EXPECT_EQ(tmpl.name(), "gemma");
    std::vector<ChatMessage> messages;
    for (const json& msg : m.at("chat").at("messages"))
        messages.push_back({msg.at("role").get<std::string>(), msg.at("content").get<std::string>()});
    const std::string rendered = tmpl.render(messages, AddGenerationPrompt::yes);
    EXPECT_EQ(rendered, m.at("chat").at("rendered").get<std::string>());
    EXPECT_EQ(model->tokenizer().encode(rendered, AddSpecial::no, ParseSpecial::yes),
              m.at("chat").at("ids").get<Ids>());
}

// The forms differ in how text becomes tokens, so their fingerprints (which hash every tokenizer.ggml.* key) differ.
TEST(HfSpmTokenizer, FormsHaveDifferentFingerprints) {
    std::vector<std::string> seen;
    for (const json& form : fixture().at("forms")) {
        const std::string fp = compute_model_fingerprint(*tokenizer_file(source_path(form))).hex();
        EXPECT_EQ(std::count(seen.begin(), seen.end(), fp), 0) << form.at("form");
        seen.push_back(fp);
    }
}

void expect_refused(const json& tok, ErrorCode code, const std::string& names) {
    SCOPED_TRACE(names);
    const std::string path = fixture_path("hf/spm/tokenizers/metaspace_never.json");
    try {
        tokenizer_file(path, tok);
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
        if (code == ErrorCode::unsupported) {
            EXPECT_NE(std::string(e.what()).find("GGUF"), std::string::npos) << e.what();
        }
    }
}

TEST(HfSpmTokenizer, RefusesWhatItCannotMapExactly) {
    const json base = load_json(fixture_path("hf/spm/tokenizers/metaspace_never.json"));
    ASSERT_NO_THROW(tokenizer_file(fixture_path("hf/spm/tokenizers/metaspace_never.json"), base));
    json t = base;
    t["model"]["type"] = "Unigram";
    expect_refused(t, ErrorCode::unsupported, "Unigram");
    t = base;
    t["normalizer"] = json{{"type", "NFKC"}};
    expect_refused(t, ErrorCode::unsupported, "normalizer NFKC");
    t = base;
    t["pre_tokenizer"] = json{{"type", "Whitespace"}};
    expect_refused(t, ErrorCode::unsupported, "pre_tokenizer Whitespace");
    t = base;
    t["pre_tokenizer"]["prepend_scheme"] = "sometimes";
    expect_refused(t, ErrorCode::unsupported, "prepend_scheme 'sometimes'");
    t = base;
    t["decoder"] = json{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}};
    expect_refused(t, ErrorCode::unsupported, "decoder Metaspace");
    t = base;
    t["model"]["ignore_merges"] = true;
    expect_refused(t, ErrorCode::unsupported, "ignore_merges");
    t = base;
    t["model"]["dropout"] = 0.1;
    expect_refused(t, ErrorCode::unsupported, "dropout");
    t = base;
    t["model"]["vocab"].erase("<0x41>");
    expect_refused(t, ErrorCode::unsupported, "<0x41>");
    t = base;
    t["added_tokens"][0]["normalized"] = true;
    expect_refused(t, ErrorCode::unsupported, "normalized");
    t = base;
    t["model"]["merges"].push_back(json::array({"<0x41>", "zzz-not-a-token"}));
    expect_refused(t, ErrorCode::bad_format, "zzz-not-a-token");
}

// Gemma 3's real vocabulary as a tokenizer.json (transformers' fast tokenizer built from the GGUF), checked once
// by hand: KVSTASH_GEMMA_TOKENIZER_DIR=<dir written by tests/reference/check_gemma_tokenizer_json.py>. Against
// tokenizers' ids for every text there, and counting where the GGUF's own tokenizer (llama.cpp's) differs.
TEST(HfSpmTokenizer, RealGemmaTokenizerJson) {
    const char* dir = std::getenv("KVSTASH_GEMMA_TOKENIZER_DIR");
    if (dir == nullptr || *dir == '\0') GTEST_SKIP() << "KVSTASH_GEMMA_TOKENIZER_DIR not set";
    const json expected = load_json(std::string(dir) + "/expected.json");
    const auto file = tokenizer_file(std::string(dir) + "/tokenizer.json");
    const Tokenizer tok = make_tokenizer(vocabulary_from_gguf(*file));
    size_t n = 0, wrong = 0, decode_wrong = 0, gguf_differs = 0, gguf_known = 0;
    for (const json& c : expected.at("cases")) {
        const std::string text = c.at("text").get<std::string>();
        const Ids ids = c.at("ids").get<Ids>();
        const Ids ours = tok.encode(text, AddSpecial::no, ParseSpecial::yes);
        ++n;
        if (ours != ids && ++wrong <= 10) {
            ADD_FAILURE() << "text '" << text << "': " << ::testing::PrintToString(ours) << " expected "
                          << ::testing::PrintToString(ids);
        }
        if (c.contains("decoded") && tok.decode(ids) != c.at("decoded").get<std::string>()) ++decode_wrong;
        if (c.contains("gguf_ids")) {
            ++gguf_known;
            if (c.at("gguf_ids").get<Ids>() != ours) ++gguf_differs;
        }
    }
    std::printf(
        "real Gemma tokenizer.json: %zu texts, %zu differ from tokenizers, %zu decodes differ; the GGUF "
        "(llama.cpp) ids differ on %zu of %zu\n",
        n, wrong, decode_wrong, gguf_differs, gguf_known);
    std::printf("fingerprint of the directory's tokenizer metadata: %s\n",
                compute_model_fingerprint(*file).hex().c_str());
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(decode_wrong, 0u);
}

}  // namespace
}  // namespace kvstash::test
