// Hugging Face tokenizers' BPE model with byte fallback: what a SentencePiece-style tokenizer.json (Gemma, Llama 2,
// Mistral) runs on each piece of text, once spaces are '▁' (Vocabulary::hf_merge_by_rank).
//
// The piece starts as one symbol per UTF-8 character that is a token; a character that is not becomes its bytes'
// <0xXX> tokens (byte fallback; <unk> when one is missing). Then, repeatedly, the adjacent pair with the lowest
// rank in `merges` is merged into its token (leftmost on equal ranks), as tokenizers' Word::merge_all does.
// SentencePieceEncoder (spm.h) merges any adjacent pair whose concatenation is a token by score instead; the two
// differ where a token is reachable through a pair that `merges` lacks (a BPE trained by tokenizers), or where two
// pairs make the same token and tokenizers' ranks order them differently from "leftmost first".
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocabulary.h"

namespace kvstash::tokenization {

class HfBpeEncoder {
public:
    // Throws Error(bad_format) for a merge that is not "left right" with both parts and their concatenation tokens.
    explicit HfBpeEncoder(const Vocabulary& vocab);

    // Appends the ids of `piece` (already '▁' for spaces) to `out`.
    void encode(std::string_view piece, std::vector<int32_t>& out) const;

private:
    struct Merge {
        int32_t rank;
        int32_t id;  // the merged token
    };
    static uint64_t pair_key(int32_t left, int32_t right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }

    std::unordered_map<std::string, int32_t> ids_;  // token text -> id (the first id with that text)
    std::unordered_map<uint64_t, Merge> merges_;    // pair_key(left, right) -> merge
    std::array<int32_t, 256> byte_ids_{};           // <0xXX> tokens; -1 if missing
    int32_t unk_id_ = -1;
};

}  // namespace kvstash::tokenization
