// SentencePiece-style BPE (tokenizer.ggml.model "llama": Llama 2, TinyLlama, Mistral v0.1).
//
// The text (spaces already replaced by U+2581 '▁' by the caller) starts as one symbol per UTF-8
// character. Repeatedly, the adjacent pair whose concatenation is a token with the highest score is
// merged (leftmost first on equal scores), as llama.cpp's llm_tokenizer_spm and SentencePiece's BPE
// do. A final symbol that is not a token (a character outside the vocabulary) becomes its UTF-8 bytes
// as <0xXX> byte tokens (byte fallback), or <unk> when the vocabulary has no byte tokens.
// Malformed UTF-8 bytes are single symbols and so also take the byte fallback.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocabulary.h"

namespace kvstash::tokenization {

class SentencePieceEncoder {
public:
    explicit SentencePieceEncoder(const Vocabulary& vocab);

    // Appends the ids of `text` (already escaped: ' ' -> "▁") to `out`.
    void encode(std::string_view text, std::vector<int32_t>& out) const;

    // The byte a <0xXX> token stands for, or -1.
    static int parse_byte_token(std::string_view token);

private:
    int32_t find(std::string_view text) const;

    std::unordered_map<std::string, int32_t> mergeable_;  // normal / user-defined / unused tokens
    std::vector<float> scores_;
    std::array<int32_t, 256> byte_ids_{};  // <0xXX> tokens; -1 if missing
    int32_t unk_id_ = -1;
};

}  // namespace kvstash::tokenization
