// Pre-tokenizers for byte-level BPE: split text into the "words" BPE runs on, with the same
// regular expressions as Hugging Face tokenizers (tokenizer.json) and llama.cpp use, named by the
// GGUF key tokenizer.ggml.pre.
//
// A pre-tokenizer is a sequence of regex stages (HF `Split(behavior="isolated")`): each stage cuts
// every piece of the previous stage into its matches and the gaps between them; both are kept, so the
// pieces always cover the text exactly. The patterns run in PCRE2 with UTF + UCP, so \p{L}, \p{N} and
// \s are Unicode classes. Invalid UTF-8 is allowed (PCRE2_MATCH_INVALID_UTF): a malformed byte matches
// no pattern item, so it ends up in a gap piece of its own and is encoded as its byte, which keeps
// decode(encode(s)) == s for any bytes the vocabulary can spell. (HF cannot take such input at all;
// llama.cpp replaces it by U+FFFD.)
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash::tokenization {

class PreTokenizer {
public:
    // `name` is a tokenizer.ggml.pre value. Throws Error(unsupported) for an unknown one, listing the
    // known names.
    explicit PreTokenizer(std::string_view name);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    // Appends the pieces of `text` to `pieces`: views into `text`, in order, non-empty, covering it.
    // Thread-safe (const; match state is per call).
    void split(std::string_view text, std::vector<std::string_view>& pieces) const;

    // Whether the vocabulary family this name stands for emits a word that is itself a token without
    // running merges (HF BPE `ignore_merges`; true for Llama 3).
    bool ignore_merges() const { return ignore_merges_; }
    // Whether the text is put in Unicode NFC before splitting (HF normalizer NFC; Qwen2). llama.cpp
    // skips this step, so it differs from HF on text that is not already in NFC.
    bool normalize_nfc() const { return normalize_nfc_; }

    static std::vector<std::string> known_names();

private:
    struct Stage;
    std::vector<std::unique_ptr<Stage>> stages_;
    bool ignore_merges_ = false;
    bool normalize_nfc_ = false;
};

}  // namespace kvstash::tokenization
