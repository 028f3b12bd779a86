#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/byte_unicode.h"

namespace kvstash::tokenization {

BytePairEncoder::BytePairEncoder(const Vocabulary& vocab, bool ignore_merges) : ignore_merges_(ignore_merges) {
    token_ids_.reserve(vocab.tokens.size());
    for (size_t id = 0; id < vocab.tokens.size(); ++id) token_ids_[vocab.tokens[id]] = static_cast<int32_t>(id);

    for (unsigned byte = 0; byte < 256; ++byte) {
        const auto it = token_ids_.find(to_byte_level(std::string(1, static_cast<char>(byte))));
        byte_ids_[byte] = it == token_ids_.end() ? -1 : it->second;
    }

    merges_.reserve(vocab.merges.size());
    for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
        const std::string& merge = vocab.merges[rank];
        // "left right"; the separator is the first space after the first character (llama.cpp).
        const size_t space = merge.find(' ', 1);
        if (space == std::string::npos) continue;
        const auto left = token_ids_.find(merge.substr(0, space));
        const auto right = token_ids_.find(merge.substr(space + 1));
        const auto merged = token_ids_.find(merge.substr(0, space) + merge.substr(space + 1));
        if (left == token_ids_.end() || right == token_ids_.end() || merged == token_ids_.end()) continue;
        // A repeated pair keeps its first (best) rank.
        merges_.try_emplace(pair_key(left->second, right->second), Merge{static_cast<int32_t>(rank), merged->second});
    }
}

void BytePairEncoder::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
        const auto it = token_ids_.find(to_byte_level(word));
        if (it != token_ids_.end()) {
            out.push_back(it->second);
            return;
        }
    }

    // Symbols form a doubly linked list over the original byte positions; a merge keeps the left
    // symbol and unlinks the right one.
    struct Symbol {
        int32_t id;
        int32_t prev;
        int32_t next;
        bool alive;
    };
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    for (char c : word) {
        const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
        // A byte the vocabulary cannot spell is dropped, as HF (byte-level BPE has no unk_token) and
        // llama.cpp do. SmolLM2 lacks 0x04 0x06 0x13 0x14 0x16 0x1D 0xC0 0xC1 0xF1 0xF2 0xF5-0xFF.
        if (id < 0) continue;
        const auto index = static_cast<int32_t>(symbols.size());
        symbols.push_back({id, index - 1, index + 1, true});
    }
    if (symbols.empty()) return;
    symbols.back().next = -1;

    struct Candidate {
        int32_t rank;
        int32_t left;  // position of the left symbol
        int32_t merged_id;
    };
    // std::*_heap keeps the "largest" on top: make that the lowest rank, then the leftmost.
    const auto worse = [](const Candidate& a, const Candidate& b) {
        return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
    };
    std::vector<Candidate> heap;
    heap.reserve(symbols.size());
    const auto consider = [&](int32_t left) {
        if (left < 0) return;
        const int32_t right = symbols[left].next;
        if (right < 0) return;
        const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
        if (it == merges_.end()) return;
        heap.push_back({it->second.rank, left, it->second.merged_id});
        std::push_heap(heap.begin(), heap.end(), worse);
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), worse);
        const Candidate top = heap.back();
        heap.pop_back();
        Symbol& left = symbols[top.left];
        if (!left.alive || left.next < 0) continue;
        // The pair may have changed since it was queued; it still counts if it merges to the same
        // token (HF's check).
        Symbol& right = symbols[left.next];
        const auto it = merges_.find(pair_key(left.id, right.id));
        if (it == merges_.end() || it->second.merged_id != top.merged_id) continue;

        left.id = top.merged_id;
        right.alive = false;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = top.left;
        consider(left.prev);
        consider(top.left);
    }

    for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace kvstash::tokenization
