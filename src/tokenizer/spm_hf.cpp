#include "tokenizer/spm_hf.h"

#include <algorithm>

#include "base/utf8.h"
#include "kvstash/error.h"
#include "tokenizer/spm.h"

namespace kvstash::tokenization {

HfBpeEncoder::HfBpeEncoder(const Vocabulary& vocab) : unk_id_(vocab.unk_id) {
    byte_ids_.fill(-1);
    for (size_t id = 0; id < vocab.tokens.size(); ++id) {
        const auto type = static_cast<TokenType>(id < vocab.token_types.size() ? vocab.token_types[id] : 1);
        const std::string& text = vocab.tokens[id];
        if (type == TokenType::byte) {
            const int byte = SentencePieceEncoder::parse_byte_token(text);
            if (byte >= 0 && byte_ids_[byte] < 0) byte_ids_[byte] = static_cast<int32_t>(id);
        }
        if (type != TokenType::unused) ids_.emplace(text, static_cast<int32_t>(id));
    }
    merges_.reserve(vocab.merges.size());
    for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
        const std::string& merge = vocab.merges[rank];
        const size_t space = merge.find(' ');
        const auto bad = [&](const std::string& why) {
            return Error(ErrorCode::bad_format, "merge " + std::to_string(rank) + " '" + merge + "' " + why);
        };
        if (space == std::string::npos || merge.find(' ', space + 1) != std::string::npos)
            throw bad("is not two tokens separated by one space");
        const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
        const auto l = ids_.find(left), r = ids_.find(right), m = ids_.find(left + right);
        if (l == ids_.end() || r == ids_.end() || m == ids_.end())
            throw bad("names a token that is not in the vocabulary");
        // tokenizers keeps the last rank of a pair listed twice (its merge map is built by insertion).
        merges_[pair_key(l->second, r->second)] = Merge{static_cast<int32_t>(rank), m->second};
    }
}

void HfBpeEncoder::encode(std::string_view piece, std::vector<int32_t>& out) const {
    struct Symbol {
        int32_t id;
        uint32_t size;  // bytes of `piece`; 0 once merged into its left neighbour
        int32_t prev;
        int32_t next;
    };
    std::vector<Symbol> symbols;
    const auto push = [&](int32_t id, size_t size) {
        const auto index = static_cast<int32_t>(symbols.size());
        symbols.push_back({id, static_cast<uint32_t>(size), index - 1, index + 1});
    };
    for (size_t pos = 0; pos < piece.size();) {
        const size_t len = std::max<size_t>(1, utf8::sequence_length(piece, pos));
        const std::string_view ch = piece.substr(pos, len);
        pos += len;
        if (const auto it = ids_.find(std::string(ch)); it != ids_.end()) {
            push(it->second, len);
            continue;
        }
        const bool all_bytes =
            std::all_of(ch.begin(), ch.end(), [&](char c) { return byte_ids_[static_cast<uint8_t>(c)] >= 0; });
        if (all_bytes) {
            for (char c : ch) push(byte_ids_[static_cast<uint8_t>(c)], 1);
        } else if (unk_id_ >= 0) {
            push(unk_id_, len);  // vocabulary_hf.cpp requires all 256 byte tokens, so only a hand-made vocabulary
        }
    }
    if (symbols.empty()) return;
    symbols.back().next = -1;

    struct Candidate {
        int32_t rank;
        int32_t left;
        int32_t id;  // the merged token, to spot a pair that changed since it was queued
    };
    // Top of the heap: the lowest rank, then the leftmost (tokenizers' Merge ordering).
    const auto worse = [](const Candidate& a, const Candidate& b) {
        return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
    };
    const auto merge_of = [&](int32_t left) -> const Merge* {
        const auto it = merges_.find(pair_key(symbols[left].id, symbols[symbols[left].next].id));
        return it == merges_.end() ? nullptr : &it->second;
    };
    std::vector<Candidate> heap;
    const auto consider = [&](int32_t left) {
        if (left < 0 || symbols[left].next < 0) return;
        if (const Merge* m = merge_of(left)) {
            heap.push_back({m->rank, left, m->id});
            std::push_heap(heap.begin(), heap.end(), worse);
        }
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), worse);
        const Candidate top = heap.back();
        heap.pop_back();
        Symbol& left = symbols[top.left];
        if (left.size == 0 || left.next < 0) continue;
        const Merge* current = merge_of(top.left);
        if (current == nullptr || current->id != top.id) continue;  // stale: one side has changed since
        Symbol& right = symbols[left.next];
        left.id = top.id;
        left.size += right.size;
        right.size = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = top.left;
        consider(left.prev);
        consider(top.left);
    }
    for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace kvstash::tokenization
