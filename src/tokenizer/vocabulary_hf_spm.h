// The SentencePiece-style part of vocabulary_hf.cpp: a tokenizer.json whose model is BPE with "byte_fallback": true
// (Gemma, Llama 2, Mistral), read as a `tokenizer.ggml.model = "llama"` vocabulary that tokenizes exactly as
// Hugging Face tokenizers does (Vocabulary::hf_* says how it differs from llama.cpp's SentencePiece).
//
// Accepted forms (anything else is refused, naming it, with the advice to convert the model to GGUF):
//   normalizer Replace(" " -> "▁"), optionally after Prepend("▁") (Llama 2's: a '▁' before each piece of text),
//     with pre_tokenizer null or Split(" ") (a no-op once spaces are '▁': Gemma's);
//   or normalizer null with pre_tokenizer Metaspace("▁", prepend_scheme always/first/never, split);
//   decoder Sequence[Replace("▁" -> " "), ByteFallback, Fuse] optionally + Strip(" ", 1, 0);
//   model BPE with byte_fallback, all 256 <0xXX> tokens, no dropout, subword prefix/suffix or ignore_merges;
//   added tokens not normalized (matched in the raw text) and without lstrip/rstrip/single_word.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "format/gguf_values.h"

namespace kvstash {

// Whether `model` (tokenizer.json's "model") is SentencePiece-style BPE.
bool is_sentencepiece_bpe(const nlohmann::json& model);

// The keys that make `tokens` (by id, as vocabulary_hf.cpp lays them out) a SentencePiece vocabulary: model,
// pre, scores (-1 - the rank of the first merge making the token, 0 for tokens no merge makes: llama.cpp's
// score order where the merges allow it), merges (parts with a space dropped: no text reaching the model has one),
// add_space_prefix, the tokenizer.ggml.hf_* keys. Throws Error(unsupported) for a form kvstash does not read,
// Error(bad_format) for malformed contents.
gguf::Metadata sentencepiece_keys_from_hf(const nlohmann::json& tokenizer, const std::vector<std::string>& tokens,
                                          const std::string& display_path);

}  // namespace kvstash
