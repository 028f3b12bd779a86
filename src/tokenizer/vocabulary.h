// The tokenizer's input: a model's vocabulary as a GGUF stores it under `tokenizer.ggml.*`.
// A plain value filled by the caller (vocabulary_from_gguf, or a test building a tiny vocabulary),
// so the tokenizer depends on no file format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvstash {

namespace gguf {
class File;
}

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,       // <|im_start|>, <s>: matched in text only when parse_special is set
    user_defined = 4,  // added tokens such as <think>: always matched in text, like llama.cpp and HF
    unused = 5,
    byte = 6,  // SentencePiece byte fallback <0xXX>
};

struct Vocabulary {
    std::string model;                 // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE)
    std::string pre;                   // tokenizer.ggml.pre: "smollm", "llama-bpe", "qwen2", "gpt2", "default", ...
    std::vector<std::string> tokens;   // tokenizer.ggml.tokens, indexed by token id
    std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (TokenType values); empty = all normal
    std::vector<float> scores;         // tokenizer.ggml.scores (SentencePiece merge priority); may be empty
    std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right", best (rank 0) first
    int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1;
    bool add_bos = false, add_eos = false, add_space_prefix = false;
    // Special / user-defined tokens that, when matched in text, swallow the whitespace after them (HF
    // AddedToken rstrip). No GGUF key holds this: vocabulary_from_gguf sets it as llama.cpp does
    // (Phi-3, by general.name: <|user|>, <|end|>, <|assistant|>, ..., </s>).
    std::vector<int32_t> rstrip_ids;
    // A SentencePiece-style tokenizer.json (model directory) works as Hugging Face tokenizers' BPE model, which no
    // llama.cpp key describes; vocabulary_hf.cpp writes these as tokenizer.ggml.hf_* keys (fingerprinted):
    // merge by `merges` rank (leftmost on ties) instead of by score; the Metaspace pre-tokenizer's space prefix
    // ("always": before each piece of text that does not start with a space; "first": only at the text's start;
    // "never"; empty: no Metaspace, add_space_prefix as llama.cpp) and split (merges stop before each '▁'); decode
    // strips one space at the start of the output only (a Strip decoder), not after each special token.
    bool hf_merge_by_rank = false;
    std::string hf_metaspace;
    bool hf_metaspace_split = false;
    bool hf_decode_strip_space = false;
    // What was odd but loadable (a special token id past the vocabulary, read as "no such token"): the
    // library never prints, Model::warnings() hands these to the program.
    std::vector<std::string> warnings;
};

// Reads `tokenizer.ggml.*` from a GGUF. Missing optional keys take llama.cpp's defaults for the
// model type (SentencePiece: bos 1, eos 2, unk 0, add_bos, add_space_prefix); rstrip_ids come from
// general.name as in llama.cpp. Throws
// Error(bad_format) naming the key when the tokens are missing or an array has the wrong type or
// length.
Vocabulary vocabulary_from_gguf(const gguf::File& file);

}  // namespace kvstash
