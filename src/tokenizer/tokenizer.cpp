#include "kvstash/tokenizer.h"
#include "tokenizer/tokenizer_access.h"
#include "tokenizer/vocabulary.h"

#include <array>
#include <optional>
#include <utility>

#include "base/utf8.h"
#include "kvstash/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/spm_hf.h"
#include "tokenizer/unicode_nfc.h"

namespace kvstash {
namespace {

using tokenization::BytePairEncoder;
using tokenization::HfBpeEncoder;
using tokenization::PreTokenizer;
using tokenization::SentencePieceEncoder;

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Texts of control tokens that end a turn (llama.cpp llama_vocab::impl::load, special_eog_ids).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>",      "<|endoftext|>", "<|eom_id|>",
    "<EOT>",      "_<EOT>",     "<|end_of_text|>", "<end_of_utterance>", "<|return|>",    "<|call|>",
};

// Special tokens found in text: leftmost, then longest. A byte trie; the root is a direct table
// because almost every text position is looked up there and misses.
class SpecialTokenMatcher {
public:
    void add(std::string_view text, int32_t id, bool needs_parse_special) {
        if (text.empty()) return;
        int32_t node = root_[static_cast<uint8_t>(text[0])];
        if (node < 0) {
            node = new_node();
            root_[static_cast<uint8_t>(text[0])] = node;
        }
        for (size_t i = 1; i < text.size(); ++i) {
            const auto byte = static_cast<uint8_t>(text[i]);
            int32_t child = -1;
            for (const auto& [b, n] : nodes_[node].children) {
                if (b == byte) child = n;
            }
            if (child < 0) {
                child = new_node();
                nodes_[node].children.emplace_back(byte, child);
            }
            node = child;
        }
        // Two tokens with the same text: the first id keeps it.
        if (nodes_[node].id < 0) {
            nodes_[node].id = id;
            nodes_[node].needs_parse_special = needs_parse_special;
        }
    }

    // The longest eligible token starting at text[pos]: (id, length), or id -1.
    std::pair<int32_t, size_t> match(std::string_view text, size_t pos, bool parse_special) const {
        std::pair<int32_t, size_t> best{-1, 0};
        int32_t node = root_[static_cast<uint8_t>(text[pos])];
        size_t length = 1;
        while (node >= 0) {
            const Node& n = nodes_[node];
            if (n.id >= 0 && (parse_special || !n.needs_parse_special)) best = {n.id, length};
            if (pos + length >= text.size()) break;
            const auto byte = static_cast<uint8_t>(text[pos + length]);
            int32_t next = -1;
            for (const auto& [b, c] : n.children) {
                if (b == byte) next = c;
            }
            node = next;
            ++length;
        }
        return best;
    }

    bool empty() const { return nodes_.empty(); }

private:
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> children;
        int32_t id = -1;
        bool needs_parse_special = false;
    };
    int32_t new_node() {
        nodes_.emplace_back();
        return static_cast<int32_t>(nodes_.size() - 1);
    }
    std::array<int32_t, 256> root_ = make_root();
    std::vector<Node> nodes_;
    static std::array<int32_t, 256> make_root() {
        std::array<int32_t, 256> root{};
        root.fill(-1);
        return root;
    }
};

TokenType type_of(const Vocabulary& vocab, int32_t id) {
    return id < static_cast<int32_t>(vocab.token_types.size()) ? static_cast<TokenType>(vocab.token_types[id])
                                                               : TokenType::normal;
}

void check_special_id(const Vocabulary& vocab, int32_t id, const char* name) {
    if (id < -1 || id >= static_cast<int32_t>(vocab.tokens.size())) {
        throw Error(ErrorCode::invalid_argument, std::string("vocabulary ") + name + " " + std::to_string(id) +
                                                     " is outside the " + std::to_string(vocab.tokens.size()) +
                                                     "-token vocabulary");
    }
}

// Bytes of the White_Space character at text[pos], or 0: what HF's AddedToken rstrip skips (Rust
// char::is_whitespace). llama.cpp skips ASCII whitespace only.
size_t whitespace_length(std::string_view text, size_t pos) {
    if (pos >= text.size()) return 0;
    char32_t cp = 0;
    const size_t length = utf8::decode(text, pos, &cp);
    if (length == 0) return 0;
    const bool white = (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
                       (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
                       cp == 0x3000;
    return white ? length : 0;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    for (size_t hit; (hit = text.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
        out.append(text.substr(pos, hit - pos));
        out.append(to);
    }
    out.append(text.substr(pos));
    return out;
}

}  // namespace

struct Tokenizer::Impl {
    Vocabulary vocab;
    bool sentencepiece = false;
    std::unique_ptr<PreTokenizer> pre_tokenizer;         // byte-level only
    std::optional<BytePairEncoder> byte_pair;            // byte-level only
    std::optional<SentencePieceEncoder> sentence_piece;  // SentencePiece only
    std::optional<HfBpeEncoder> hf_bpe;                  // SentencePiece merged by rank (vocab.hf_merge_by_rank)
    SpecialTokenMatcher specials;
    std::vector<std::string> pieces;  // token id -> decoded bytes
    std::vector<bool> end_of_generation;
    std::vector<bool> rstrip;  // token id -> swallows the whitespace after it when matched in text

    explicit Impl(Vocabulary v) : vocab(std::move(v)) {
        const size_t n = vocab.tokens.size();
        if (n == 0) throw Error(ErrorCode::invalid_argument, "vocabulary has no tokens");
        if (n > static_cast<size_t>(INT32_MAX)) throw Error(ErrorCode::invalid_argument, "vocabulary too large");
        if (!vocab.token_types.empty() && vocab.token_types.size() != n) {
            throw Error(ErrorCode::invalid_argument, "vocabulary has " + std::to_string(vocab.token_types.size()) +
                                                         " token types for " + std::to_string(n) + " tokens");
        }
        if (!vocab.scores.empty() && vocab.scores.size() != n) {
            throw Error(ErrorCode::invalid_argument, "vocabulary has " + std::to_string(vocab.scores.size()) +
                                                         " scores for " + std::to_string(n) + " tokens");
        }
        check_special_id(vocab, vocab.bos_id, "bos_id");
        check_special_id(vocab, vocab.eos_id, "eos_id");
        check_special_id(vocab, vocab.unk_id, "unk_id");
        check_special_id(vocab, vocab.pad_id, "pad_id");
        check_special_id(vocab, vocab.eot_id, "eot_id");

        if (vocab.model == "gpt2") {
            pre_tokenizer = std::make_unique<PreTokenizer>(vocab.pre.empty() ? "default" : vocab.pre);
            byte_pair.emplace(vocab, pre_tokenizer->ignore_merges());
        } else if (vocab.model == "llama") {
            sentencepiece = true;
            if (vocab.hf_merge_by_rank)
                hf_bpe.emplace(vocab);
            else
                sentence_piece.emplace(vocab);
        } else {
            throw Error(ErrorCode::unsupported, "unknown tokenizer model '" + vocab.model +
                                                    "' (tokenizer.ggml.model); kvstash knows: gpt2 (byte-level "
                                                    "BPE), llama (SentencePiece BPE)");
        }

        pieces.resize(n);
        end_of_generation.assign(n, false);
        for (size_t i = 0; i < n; ++i) {
            const auto id = static_cast<int32_t>(i);
            const std::string& text = vocab.tokens[i];
            const TokenType type = type_of(vocab, id);
            const bool special = type == TokenType::control || type == TokenType::unknown;
            if (special || type == TokenType::user_defined) {
                specials.add(text, id, special);
                // Written out as its own text, so that parsed specials round-trip; tokenizers' decoder turns
                // '▁' into a space in these too.
                pieces[i] = vocab.hf_merge_by_rank ? replace_all(text, kSpaceMark, " ") : text;
            } else if (sentencepiece) {
                const int byte = type == TokenType::byte ? SentencePieceEncoder::parse_byte_token(text) : -1;
                pieces[i] = byte >= 0 ? std::string(1, static_cast<char>(byte)) : replace_all(text, kSpaceMark, " ");
            } else {
                pieces[i] = tokenization::from_byte_level(text);
            }
            if (type == TokenType::control) {
                for (std::string_view eog : kEndOfGenerationTexts) {
                    if (text == eog) end_of_generation[i] = true;
                }
            }
        }
        for (int32_t id : {vocab.eos_id, vocab.eot_id}) {
            if (id >= 0) end_of_generation[id] = true;
        }
        rstrip.assign(n, false);
        for (int32_t id : vocab.rstrip_ids) {
            check_special_id(vocab, id, "rstrip id");
            if (id >= 0) rstrip[id] = true;
        }
    }

    // `text` is a piece between special tokens; `at_start`: it begins the whole text.
    void encode_text(std::string_view text, bool after_special, bool at_start, std::vector<int32_t>& ids) const {
        if (sentencepiece) {
            std::string escaped = replace_all(text, " ", kSpaceMark);
            bool prefix = vocab.add_space_prefix && after_special;
            if (vocab.hf_metaspace == "always" || vocab.hf_metaspace == "first") {
                // tokenizers' Metaspace: no '▁' before a piece that starts with one, and with "first" only
                // before the piece that begins the text.
                prefix = prefix && !escaped.starts_with(kSpaceMark) && (vocab.hf_metaspace == "always" || at_start);
            }
            // Otherwise llama.cpp (and SentencePiece run on each piece between specials): a space before the
            // text at the start and after every special token.
            if (prefix) escaped.insert(0, kSpaceMark);
            if (!hf_bpe) {
                sentence_piece->encode(escaped, ids);
            } else if (!vocab.hf_metaspace_split) {
                hf_bpe->encode(escaped, ids);
            } else {
                // Metaspace split: a word starts at each '▁' (merged with what follows it).
                const std::string_view all = escaped;
                size_t begin = 0;
                for (size_t hit = all.find(kSpaceMark, 1); hit != std::string_view::npos;
                     hit = all.find(kSpaceMark, hit + kSpaceMark.size())) {
                    if (hit > begin) hf_bpe->encode(all.substr(begin, hit - begin), ids);
                    begin = hit;
                }
                if (begin < all.size()) hf_bpe->encode(all.substr(begin), ids);
            }
            return;
        }
        std::string normalized;
        if (pre_tokenizer->normalize_nfc()) {
            normalized = tokenization::to_nfc(text);
            text = normalized;
        }
        std::vector<std::string_view> words;
        pre_tokenizer->split(text, words);
        for (std::string_view word : words) byte_pair->encode_word(word, ids);
    }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tokenizer TokenizerAccess::make(Vocabulary vocab) {
    return Tokenizer(std::make_unique<Tokenizer::Impl>(std::move(vocab)));
}
const Vocabulary& TokenizerAccess::vocabulary(const Tokenizer& tokenizer) { return tokenizer.impl_->vocab; }
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, AddSpecial add_special_tokens,
                                       ParseSpecial parse_special_tokens) const {
    return encode(text, add_special_tokens, parse_special_tokens, {});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, AddSpecial add_special_tokens,
                                       ParseSpecial parse_special_tokens, std::span<const TextRange> plain) const {
    const bool add_special = add_special_tokens == AddSpecial::yes;
    const bool parse_special = parse_special_tokens == ParseSpecial::yes;
    const Impl& im = *impl_;
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 2);
    if (add_special && im.vocab.add_bos && im.vocab.bos_id >= 0) ids.push_back(im.vocab.bos_id);

    bool after_special = true;  // the start of the text counts as "after a special token"
    size_t text_start = 0;
    const auto flush = [&](size_t end) {
        if (end > text_start) {
            im.encode_text(text.substr(text_start, end - text_start), after_special, text_start == 0, ids);
            after_special = false;
        }
    };
    if (!im.specials.empty()) {
        size_t range = 0;  // plain[range]: the first range that ends after pos
        for (size_t pos = 0; pos < text.size();) {
            while (range < plain.size() && plain[range].end <= pos) ++range;
            const bool in_plain = range < plain.size() && plain[range].begin <= pos;
            // A match may not cross into or out of a plain range.
            const size_t limit = range == plain.size() ? text.size() : in_plain ? plain[range].end : plain[range].begin;
            const auto [id, length] = im.specials.match(text, pos, parse_special && !in_plain);
            if (id < 0 || pos + length > limit) {
                ++pos;
                continue;
            }
            flush(pos);
            ids.push_back(id);
            after_special = true;
            pos += length;
            if (im.rstrip[id]) {
                while (const size_t space = whitespace_length(text, pos)) pos += space;
            }
            text_start = pos;
        }
    }
    flush(text.size());

    if (add_special && im.vocab.add_eos && im.vocab.eos_id >= 0) ids.push_back(im.vocab.eos_id);
    return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    const Impl& im = *impl_;
    // SentencePiece: drop the space encode() put at the start and after each token matched as special;
    // tokenizers' Strip decoder: only the one at the start of the output.
    const bool hf = im.vocab.hf_merge_by_rank;
    const bool spaced = im.sentencepiece && (hf ? im.vocab.hf_decode_strip_space : im.vocab.add_space_prefix);
    bool strip_space = spaced;
    std::string out;
    for (int32_t id : ids) {
        if (id < 0 || id >= n_vocab()) token_piece(id);  // throws the out-of-range error
        const std::string& piece = im.pieces[id];
        const TokenType type = type_of(im.vocab, id);
        if (type == TokenType::control || type == TokenType::unknown || type == TokenType::user_defined) {
            out += piece;
            strip_space = spaced && !hf;
            continue;
        }
        if (strip_space && !piece.empty() && piece[0] == ' ') {
            out.append(piece, 1);
        } else {
            out += piece;
        }
        strip_space = false;
    }
    return out;
}

std::string Tokenizer::token_piece(int32_t id) const {
    if (id < 0 || id >= n_vocab()) {
        throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                                     std::to_string(n_vocab() - 1) + ")");
    }
    return impl_->pieces[id];
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->vocab.tokens.size()); }
int32_t Tokenizer::bos() const { return impl_->vocab.bos_id; }
int32_t Tokenizer::eos() const { return impl_->vocab.eos_id; }
bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && impl_->end_of_generation[id]; }

}  // namespace kvstash
