// Tokenizer: text <-> token ids with a model's own vocabulary (GGUF tokenizer.ggml.*).
//
//   const kvstash::Tokenizer& tok = model->tokenizer();
//   std::vector<int32_t> ids = tok.encode("<|im_start|>user\nHi<|im_end|>", kvstash::AddSpecial::yes,
//                                         kvstash::ParseSpecial::yes);
//   std::string text = tok.decode(ids);   // the same bytes back
//
// Immutable after construction; every method is const and safe to call from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash {

// encode(): BOS / EOS around the text as the vocabulary's add_bos / add_eos say (yes), or none (no).
enum class AddSpecial : bool { no, yes };
// encode(): control tokens written in the text (<|im_start|>, <s>) become those tokens (yes), or are
// tokenized as plain text (no).
enum class ParseSpecial : bool { no, yes };

// Bytes [begin, end) of a text.
struct TextRange {
    size_t begin = 0;
    size_t end = 0;
};

// Built by a Model from its file's vocabulary (Model::tokenizer()).
class Tokenizer {
public:
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    // add_special, parse_special: see the enums above. User-defined tokens (type 4) are matched either
    // way, as llama.cpp and HF do. Where several match, the longest wins.
    // Any bytes are accepted; malformed UTF-8 is encoded byte by byte (see pretokenizer.h). A byte
    // the byte-level vocabulary has no token for is dropped, as HF and llama.cpp do (SmolLM2 lacks
    // 0x04 0x06 0x13 0x14 0x16 0x1D 0xC0 0xC1 0xF1 0xF2 0xF5-0xFF).
    std::vector<int32_t> encode(std::string_view text, AddSpecial add_special, ParseSpecial parse_special) const;
    // The same, but no control token is matched in the bytes of `plain` (sorted, disjoint ranges), nor across
    // a range's edge: what a user wrote inside a chat template stays text, whatever it spells
    // (ChatTemplate::render_prompt gives the ranges). Text without control-token spellings in `plain`
    // encodes exactly as without them.
    std::vector<int32_t> encode(std::string_view text, AddSpecial add_special, ParseSpecial parse_special,
                                std::span<const TextRange> plain) const;

    // The exact bytes of the tokens, control tokens written out as their text, so that
    // decode(encode(s, AddSpecial::no, parse_special)) == s for every s whose bytes the vocabulary can spell
    // (for SentencePiece, every s without U+2581, which it uses for spaces), with two exceptions that
    // follow Hugging Face: Qwen2 normalises text to NFC first, so the round trip gives the NFC form,
    // and whitespace swallowed by an rstrip token (Phi-3's <|end|> and friends) is not given back.
    // Throws Error(invalid_argument) for an id outside the vocabulary.
    std::string decode(std::span<const int32_t> ids) const;
    // The bytes of one token (for streaming; may be part of a UTF-8 character). For SentencePiece,
    // '▁' is already a space and the space decode() drops after BOS is kept.
    std::string token_piece(int32_t id) const;

    int32_t n_vocab() const;
    int32_t bos() const;  // -1 when the vocabulary has none
    int32_t eos() const;
    // End of generation: EOS, EOT and control tokens that end a turn (<|im_end|>, <|eot_id|>,
    // <|endoftext|>, <end_of_turn>, ...), as llama.cpp's special_eog_ids.
    bool is_eog(int32_t id) const;

private:
    struct Impl;
    friend struct TokenizerAccess;  // the library's own construction and access (src/tokenizer/tokenizer_access.h)
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash
