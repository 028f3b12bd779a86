#include "tokenizer/spm.h"

#include <algorithm>

#include "base/utf8.h"

namespace kvstash::tokenization {

int SentencePieceEncoder::parse_byte_token(std::string_view token) {
    // Exactly "<0xHH>" with two hex digits (SentencePiece writes upper case).
    if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
    int value = 0;
    for (char c : token.substr(3, 2)) {
        value <<= 4;
        if (c >= '0' && c <= '9')
            value |= c - '0';
        else if (c >= 'A' && c <= 'F')
            value |= c - 'A' + 10;
        else if (c >= 'a' && c <= 'f')
            value |= c - 'a' + 10;
        else
            return -1;
    }
    return value;
}

SentencePieceEncoder::SentencePieceEncoder(const Vocabulary& vocab) : scores_(vocab.scores), unk_id_(vocab.unk_id) {
    scores_.resize(vocab.tokens.size(), 0.0f);
    byte_ids_.fill(-1);
    for (size_t id = 0; id < vocab.tokens.size(); ++id) {
        const auto type = static_cast<TokenType>(id < vocab.token_types.size() ? vocab.token_types[id] : 1);
        const std::string& text = vocab.tokens[id];
        if (type == TokenType::byte) {
            const int byte = parse_byte_token(text);
            if (byte >= 0 && byte_ids_[byte] < 0) byte_ids_[byte] = static_cast<int32_t>(id);
            continue;
        }
        // Control and unknown tokens (<s>, </s>, <unk>) are never formed by merging text.
        if (type == TokenType::control || type == TokenType::unknown) continue;
        mergeable_[text] = static_cast<int32_t>(id);
    }
}

int32_t SentencePieceEncoder::find(std::string_view text) const {
    const auto it = mergeable_.find(std::string(text));
    return it == mergeable_.end() ? -1 : it->second;
}

void SentencePieceEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
    struct Symbol {
        uint32_t begin;  // byte range in `text`
        uint32_t size;   // 0 once merged into its left neighbour
        int32_t prev;
        int32_t next;
    };
    std::vector<Symbol> symbols;
    for (size_t pos = 0; pos < text.size();) {
        const size_t len = std::max<size_t>(1, utf8::sequence_length(text, pos));
        const auto index = static_cast<int32_t>(symbols.size());
        symbols.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(len), index - 1, index + 1});
        pos += len;
    }
    if (symbols.empty()) return;
    symbols.back().next = -1;

    struct Candidate {
        float score;
        int32_t left;
        uint32_t size;  // bytes of the merged text, to spot a pair that changed since it was queued
    };
    // Top of the heap: the highest score, then the leftmost.
    const auto worse = [](const Candidate& a, const Candidate& b) {
        return a.score != b.score ? a.score < b.score : a.left > b.left;
    };
    std::vector<Candidate> heap;
    const auto consider = [&](int32_t left) {
        if (left < 0 || symbols[left].next < 0) return;
        const Symbol& l = symbols[left];
        const Symbol& r = symbols[l.next];
        const int32_t id = find(text.substr(l.begin, l.size + r.size));
        if (id < 0) return;
        heap.push_back({scores_[id], left, l.size + r.size});
        std::push_heap(heap.begin(), heap.end(), worse);
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), worse);
        const Candidate top = heap.back();
        heap.pop_back();
        Symbol& left = symbols[top.left];
        if (left.size == 0 || left.next < 0) continue;
        Symbol& right = symbols[left.next];
        if (left.size + right.size != top.size) continue;  // stale: one side has grown since
        left.size += right.size;
        right.size = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = top.left;
        consider(left.prev);
        consider(top.left);
    }

    for (int32_t i = 0; i >= 0; i = symbols[i].next) {
        const std::string_view piece = text.substr(symbols[i].begin, symbols[i].size);
        const int32_t id = find(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        const bool all_bytes =
            std::all_of(piece.begin(), piece.end(), [&](char c) { return byte_ids_[static_cast<uint8_t>(c)] >= 0; });
        if (all_bytes) {
            for (char c : piece) out.push_back(byte_ids_[static_cast<uint8_t>(c)]);
        } else if (unk_id_ >= 0) {
            out.push_back(unk_id_);  // one <unk> for the character, as SentencePiece without byte fallback
        }
    }
}

}  // namespace kvstash::tokenization
