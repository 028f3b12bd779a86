// Gemma 3's tokenizer and chat template against llama.cpp and transformers, on the real model file
// models/gemma-3-270m-q4_k_m.gguf (scripts/fetch_model.sh gemma3; $KVSTASH_MODELS_DIR/ if set). The vocabulary
// is read from the GGUF alone; no forward pass is needed. Fixtures, written by tests/reference/make_gemma3_fixtures.py:
//   tests/fixtures/gemma3/tokenizer_corpus.json  llama.cpp's tokenize (special on and off) and detokenize on the
//       shared corpus plus Gemma-specific strings (control tokens, whitespace-run and HTML user-defined tokens);
//   tests/fixtures/gemma3/chat.json  Gemma 3's template rendered by transformers' Jinja, and conversations it
//       refuses. The chat tests need no model file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "kvstash/tokenizer.h"
#include "support/paths.h"
#include "text/chat_template_detect.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/vocabulary.h"

namespace kvstash {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

std::string gemma3_path() {
    const char* dir = std::getenv("KVSTASH_MODELS_DIR");
    const std::string models = dir != nullptr && *dir != '\0' ? dir : test::source_dir() + "/models";
    return models + "/gemma-3-270m-q4_k_m.gguf";
}

json load_fixture(const std::string& name) {
    std::ifstream in(test::fixture_path("gemma3/" + name));
    if (!in) {
        ADD_FAILURE() << "missing " << test::fixture_path("gemma3/" + name)
                      << "; run tests/reference/make_gemma3_fixtures.py";
        return json::object();
    }
    return json::parse(in);
}

// The GGUF's metadata only: its first 32 MiB (the vocabulary arrays take ~7 MB) with the header's tensor count
// (u64 at byte 8) set to 0. gguf::File::open refuses this file while kvstash lacks Q5_0 (its tensor types are
// checked at open), and the tokenizer needs no tensor.
std::vector<uint8_t> metadata_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> bytes(size_t{32} << 20);
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    bytes.resize(static_cast<size_t>(in.gcount()));
    if (bytes.size() < 24) throw std::runtime_error(path + ": too short for a GGUF header");
    std::fill(bytes.begin() + 8, bytes.begin() + 16, uint8_t{0});
    return bytes;
}

// The tokenizer built from the GGUF's vocabulary, once per process; nullptr when the file is absent.
const Tokenizer* gemma3_tokenizer() {
    static const std::unique_ptr<Tokenizer> tokenizer = []() -> std::unique_ptr<Tokenizer> {
        if (!std::filesystem::exists(gemma3_path())) return nullptr;
        const std::vector<uint8_t> bytes = metadata_bytes(gemma3_path());
        const auto file = gguf::File::parse(bytes.data(), bytes.size(), gemma3_path());
        return std::make_unique<Tokenizer>(make_tokenizer(vocabulary_from_gguf(*file)));
    }();
    return tokenizer.get();
}

#define KVSTASH_REQUIRE_GEMMA3()                                                                                  \
    if (gemma3_tokenizer() == nullptr) {                                                                          \
        GTEST_SKIP() << gemma3_path() << " not found: run scripts/fetch_model.sh gemma3 (scripts/setup.sh does)"; \
    }                                                                                                             \
    const Tokenizer& tok = *gemma3_tokenizer()

std::string show(const Ids& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size() && i < 40; ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
    return s + (ids.size() > 40 ? ", ...]" : "]");
}

std::string excerpt(const std::string& text) {
    std::string out = "\"";
    out.append(text, 0, 100);
    out += text.size() > 100 ? "...\"" : "\"";
    return out;
}

std::string from_hex(const std::string& hex) {
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return bytes;
}

TEST(Gemma3Tokenizer, VocabularyAsLlamaCppReadsIt) {
    KVSTASH_REQUIRE_GEMMA3();
    const Vocabulary& vocab = tokenizer_vocabulary(tok);
    EXPECT_EQ(vocab.model, "llama");  // SentencePiece BPE with scores and byte fallback
    EXPECT_EQ(tok.n_vocab(), 262144);
    EXPECT_EQ(tok.bos(), 2);  // <bos>
    EXPECT_EQ(tok.eos(), 1);  // <eos>
    EXPECT_TRUE(vocab.add_bos);
    EXPECT_FALSE(vocab.add_eos);
    EXPECT_FALSE(vocab.add_space_prefix);
    EXPECT_TRUE(tok.is_eog(1));
    EXPECT_TRUE(tok.is_eog(106));  // <end_of_turn> ends a turn, as in llama.cpp
    EXPECT_FALSE(tok.is_eog(105));
    EXPECT_EQ(tok.token_piece(106), "<end_of_turn>");
}

// Where kvstash departs from llama.cpp on purpose. A listed string that matches again fails the test.
// "</s>" (id 212) is a user-defined token in this file, matched in text whether or not special tokens are parsed,
// as transformers does for a non-special added token and kvstash does for every user-defined token; llama.cpp's
// vocabulary loader turns any token spelled "</s>" into a control token (its end-of-generation list, for
// PaddleOCR), so with special=false it spells the text out instead.
const std::vector<std::string> kPlainDifferences = {"</s>", "<s>strike</s>"};

// Every corpus string: kvstash's ids equal llama.cpp's with and without parsing special tokens, and decoding
// them gives llama.cpp's detokenized bytes. Malformed UTF-8: kvstash splits it per byte and gives the bytes back
// (as on every vocabulary); llama.cpp groups a bad lead byte with the next bytes by its length alone, even
// across a space it has already turned into U+2581, so its ids there differ and are only counted.
TEST(Gemma3Tokenizer, CorpusMatchesLlamaCpp) {
    KVSTASH_REQUIRE_GEMMA3();
    const json fixture = load_fixture("tokenizer_corpus.json");
    if (fixture.empty()) return;
    int total = 0, matched = 0, matched_plain = 0, decoded = 0, malformed = 0, malformed_same = 0;
    for (const json& entry : fixture.at("entries")) {
        if (entry.contains("hex")) {
            const std::string bytes = from_hex(entry.at("hex").get<std::string>());
            const Ids ids = tok.encode(bytes, AddSpecial::no, ParseSpecial::yes);
            EXPECT_EQ(tok.decode(ids), bytes) << "malformed " << entry.at("hex");
            malformed_same += ids == entry.at("ids").get<Ids>();
            ++malformed;
            continue;
        }
        ++total;
        const std::string text = entry.at("text");
        const Ids want = entry.at("ids").get<Ids>();
        const Ids want_plain = entry.value("ids_plain", want);
        const Ids ids = tok.encode(text, AddSpecial::no, ParseSpecial::yes);
        const Ids ids_plain = tok.encode(text, AddSpecial::no, ParseSpecial::no);
        matched += ids == want;
        EXPECT_EQ(ids, want) << excerpt(text) << "\n  kvstash:   " << show(ids) << "\n  llama.cpp: " << show(want);
        if (std::find(kPlainDifferences.begin(), kPlainDifferences.end(), text) != kPlainDifferences.end()) {
            EXPECT_NE(ids_plain, want_plain)
                << "now matches llama.cpp; remove from kPlainDifferences: " << excerpt(text);
            EXPECT_EQ(ids_plain, ids) << excerpt(text);
        } else {
            matched_plain += ids_plain == want_plain;
            EXPECT_EQ(ids_plain, want_plain)
                << "(parse_special=false) " << excerpt(text) << "\n  kvstash:   " << show(ids_plain)
                << "\n  llama.cpp: " << show(want_plain);
        }
        const std::string back = tok.decode(want);
        decoded += back == entry.value("decoded", text);
        EXPECT_EQ(back, entry.value("decoded", text)) << "decode " << excerpt(text);
        EXPECT_EQ(tok.decode(want_plain), entry.value("decoded_plain", text)) << "decode (plain) " << excerpt(text);
    }
    std::cout << "[ parity   ] gemma3: corpus " << matched << "/" << total << " match llama.cpp (parse_special), "
              << matched_plain << "/" << total - kPlainDifferences.size() << " without (+" << kPlainDifferences.size()
              << " known differences); decode " << decoded << "/" << total << "; malformed UTF-8: " << malformed
              << " round trip, " << malformed_same << " with llama.cpp's ids\n";
    EXPECT_GE(total, 1300);

    for (const json& entry : fixture.at("with_bos")) {
        const std::string text = entry.at("text");
        EXPECT_EQ(tok.encode(text, AddSpecial::yes, ParseSpecial::yes), entry.at("ids").get<Ids>()) << excerpt(text);
    }
}

using Messages = std::vector<ChatMessage>;

Messages messages_of(const json& j) {
    Messages out;
    for (const json& m : j) out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    return out;
}

AddGenerationPrompt generation_prompt(const json& c) {
    return c.at("add_generation_prompt").get<bool>() ? AddGenerationPrompt::yes : AddGenerationPrompt::no;
}

// The template text is recognised as Gemma's, and named("gemma") renders every case as transformers does.
TEST(Gemma3ChatTemplate, MatchesTransformers) {
    const json fixture = load_fixture("chat.json");
    if (fixture.empty()) return;
    const ChatTemplate detected = detect_chat_template(fixture.at("template").get<std::string>());
    EXPECT_EQ(detected.name(), "gemma");
    const ChatTemplate named = ChatTemplate::named("gemma");
    int matched = 0;
    const json& cases = fixture.at("cases");
    for (size_t i = 0; i < cases.size(); ++i) {
        const Messages messages = messages_of(cases[i].at("messages"));
        const std::string expected = cases[i].at("rendered");
        const std::string rendered = named.render(messages, generation_prompt(cases[i]));
        EXPECT_EQ(rendered, expected) << "case " << i;
        EXPECT_EQ(detected.render(messages, generation_prompt(cases[i])), expected) << "case " << i;
        matched += rendered == expected;
    }
    std::cout << "gemma: " << matched << "/" << cases.size() << " cases byte-identical\n";
    EXPECT_GE(cases.size(), 30u);
    for (const json& refused : fixture.at("refused")) {
        EXPECT_THROW(named.render(messages_of(refused.at("messages")), AddGenerationPrompt::yes), Error)
            << refused.at("messages").dump();
    }
}

// With Gemma's tokenizer: each closed turn's ids are a prefix of the next rendering's, and a generated reply
// (prompt + reply + <end_of_turn>, then the template's "\n") gives the same ids as the closed turn.
TEST(Gemma3ChatTemplate, TokenPrefixStability) {
    KVSTASH_REQUIRE_GEMMA3();
    const ChatTemplate tmpl = ChatTemplate::named("gemma");
    auto encode = [&](const std::string& text) { return tok.encode(text, AddSpecial::no, ParseSpecial::yes); };
    const Ids end_of_turn = encode("<end_of_turn>");
    ASSERT_EQ(end_of_turn, Ids{106});
    const Messages conversation = {{"system", "Be brief."},
                                   {"user", "2+2?"},
                                   {"assistant", "4"},
                                   {"user", "Café? 你好 😀"},
                                   {"assistant", "Oui.\nLine two."}};
    Ids previous;
    for (size_t n = 2; n <= conversation.size(); ++n) {
        const std::span<const ChatMessage> turns(conversation.data(), n);
        const Ids closed = encode(tmpl.render(turns, AddGenerationPrompt::no));
        EXPECT_TRUE(std::equal(previous.begin(), previous.end(), closed.begin())) << n << " messages";
        if (conversation[n - 1].role != "assistant") continue;
        Ids generated = encode(tmpl.render(turns.first(n - 1), AddGenerationPrompt::yes));
        for (int32_t id : encode(conversation[n - 1].content)) generated.push_back(id);
        generated.push_back(end_of_turn[0]);
        for (int32_t id : encode(tmpl.end_of_turn_suffix())) generated.push_back(id);
        EXPECT_EQ(generated, closed) << n << " messages";
        previous = closed;
    }
    EXPECT_EQ(encode(tmpl.render(Messages{{"user", "Hi"}}, AddGenerationPrompt::yes)).front(), tok.bos());
}

}  // namespace
}  // namespace kvstash
