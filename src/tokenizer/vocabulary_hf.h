// A Hugging Face tokenizer (tokenizer.json + tokenizer_config.json + config.json's ids) read as the `tokenizer.*`
// GGUF metadata llama.cpp's converter writes for it (get_vocab_base + gguf-py's SpecialVocab): tokens by id with
// [PAD<i>] holes up to config.json's vocab_size, token types (added tokens CONTROL when special or <|...|>-looking,
// else USER_DEFINED), merges "a b", special ids, add_bos/add_eos, the chat template. The pre-tokenizer name is
// chosen from the pre-tokenizer's regex (the converter hashes the tokenizer's output instead; the names are the
// same for the families kvstash knows). vocabulary_from_gguf then reads it like any GGUF's.
// Byte-level BPE (gpt2, llama 3, qwen2 families) here; SentencePiece-style BPE with byte fallback (Gemma, Llama 2,
// Mistral) in vocabulary_hf_spm.h, read so that it tokenizes as Hugging Face tokenizers does rather than as a
// converted GGUF (whose scores come from tokenizer.model, which a tokenizer.json lacks).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "format/gguf_values.h"

namespace kvstash {

// `tokenizer_config` and `chat_template_jinja` may be null / nullopt (files absent). Throws Error(unsupported)
// for a tokenizer kind, normalizer, pre-tokenizer or decoder kvstash does not read (naming it), Error(bad_format)
// for malformed JSON contents.
gguf::Metadata tokenizer_metadata_from_hf(const nlohmann::json& tokenizer, const nlohmann::json* tokenizer_config,
                                          const nlohmann::json& config,
                                          const std::optional<std::string>& chat_template_jinja,
                                          const std::string& display_path);

}  // namespace kvstash
