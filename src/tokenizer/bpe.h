// Byte-level BPE (tokenizer.ggml.model "gpt2"): the merge step for one pre-tokenized word.
//
// A word's bytes start as one symbol each (the token spelling that byte in GPT-2's alphabet); then,
// as in HF tokenizers' BPE and llama.cpp, the adjacent pair with the best (lowest) merge rank is
// merged, leftmost first on ties, until no adjacent pair has a merge. A binary heap over the pairs
// makes a word of n bytes cost O(n log n), so one long "word" (base64, a run of symbols) stays fast.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocabulary.h"

namespace kvstash::tokenization {

class BytePairEncoder {
public:
    // Merges whose parts or result are not tokens are ignored (llama.cpp does the same; HF refuses to
    // load). `ignore_merges`: a word that is itself a token is emitted whole (HF BPE ignore_merges).
    BytePairEncoder(const Vocabulary& vocab, bool ignore_merges);

    // Appends the token ids of one word (raw bytes, any values) to `out`. Bytes without a token are
    // dropped (never <unk>), as HF and llama.cpp do.
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

    int32_t merge_count() const { return static_cast<int32_t>(merges_.size()); }

private:
    struct Merge {
        int32_t rank;
        int32_t merged_id;
    };
    static uint64_t pair_key(int32_t left, int32_t right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }

    std::unordered_map<std::string, int32_t> token_ids_;  // spelling -> id (later duplicates win, as in HF)
    std::unordered_map<uint64_t, Merge> merges_;          // (left id, right id) -> rank, result
    std::array<int32_t, 256> byte_ids_{};                 // the token spelling each byte; -1 if none
    bool ignore_merges_ = false;
};

}  // namespace kvstash::tokenization
