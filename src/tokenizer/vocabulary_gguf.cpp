// vocabulary_from_gguf: the `tokenizer.ggml.*` metadata of a GGUF as a Vocabulary.
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"
#include "kvstash/error.h"
#include "tokenizer/vocabulary.h"

namespace kvstash {
namespace {

[[noreturn]] void fail(const gguf::File& file, const std::string& what) {
    throw Error(ErrorCode::bad_format, file.path() + ": " + what);
}

// The array under `key`, or nullptr when absent. Checks the element type.
const gguf::Value* find_array(const gguf::File& file, std::string_view key, bool (*element_ok)(gguf::ValueType)) {
    const gguf::Value* value = file.find(key);
    if (value == nullptr) return nullptr;
    if (value->type != gguf::ValueType::ARRAY || !element_ok(value->array_type)) {
        fail(file, "metadata key '" + std::string(key) + "' has the wrong type for a tokenizer array");
    }
    return value;
}

bool is_string(gguf::ValueType t) { return t == gguf::ValueType::STRING; }
bool is_integer(gguf::ValueType t) {
    switch (t) {
        case gguf::ValueType::UINT8:
        case gguf::ValueType::INT8:
        case gguf::ValueType::UINT16:
        case gguf::ValueType::INT16:
        case gguf::ValueType::UINT32:
        case gguf::ValueType::INT32:
        case gguf::ValueType::UINT64:
        case gguf::ValueType::INT64: return true;
        default: return false;
    }
}
bool is_float(gguf::ValueType t) { return t == gguf::ValueType::FLOAT32 || t == gguf::ValueType::FLOAT64; }

// `key`'s token id, or -1 ("no such token"). llama.cpp stores that as -1, and some files as a value past the
// vocabulary: the file still loads (as in llama.cpp), but a past-the-end id may as well be a broken file, so
// it is named in `warnings` (what the missing token means for generation: `consequence`).
int32_t token_id(const gguf::File& file, std::string_view key, int32_t fallback, size_t n_tokens,
                 std::vector<std::string>& warnings, std::string_view consequence = {}) {
    const std::optional<int64_t> id = file.get_int(key);
    if (!id) return fallback;
    if (*id < 0) return -1;
    if (static_cast<uint64_t>(*id) >= n_tokens) {
        warnings.push_back(std::string(key) + " is " + std::to_string(*id) + ", past the vocabulary's " +
                           std::to_string(n_tokens) + " tokens; the model is used without that token" +
                           (consequence.empty() ? std::string() : " (" + std::string(consequence) + ")"));
        return -1;
    }
    return static_cast<int32_t>(*id);
}

}  // namespace

Vocabulary vocabulary_from_gguf(const gguf::File& file) {
    Vocabulary vocab;
    const std::optional<std::string> model = file.get_string("tokenizer.ggml.model");
    if (!model) fail(file, "no tokenizer: metadata key 'tokenizer.ggml.model' is missing");
    vocab.model = *model;
    vocab.pre = file.get_string("tokenizer.ggml.pre").value_or("default");

    const gguf::Value* tokens = find_array(file, "tokenizer.ggml.tokens", is_string);
    if (tokens == nullptr || tokens->array.empty()) {
        fail(file, "no tokenizer vocabulary: metadata key 'tokenizer.ggml.tokens' is missing or empty");
    }
    vocab.tokens.reserve(tokens->array.size());
    for (const gguf::Value& token : tokens->array) vocab.tokens.push_back(token.string);
    const size_t n_tokens = vocab.tokens.size();

    if (const gguf::Value* types = find_array(file, "tokenizer.ggml.token_type", is_integer)) {
        if (types->array.size() != n_tokens) {
            fail(file, "'tokenizer.ggml.token_type' has " + std::to_string(types->array.size()) + " entries for " +
                           std::to_string(n_tokens) + " tokens");
        }
        vocab.token_types.reserve(n_tokens);
        for (const gguf::Value& type : types->array) vocab.token_types.push_back(static_cast<int32_t>(type.integer));
    }
    if (const gguf::Value* scores = find_array(file, "tokenizer.ggml.scores", is_float)) {
        if (scores->array.size() != n_tokens) {
            fail(file, "'tokenizer.ggml.scores' has " + std::to_string(scores->array.size()) + " entries for " +
                           std::to_string(n_tokens) + " tokens");
        }
        vocab.scores.reserve(n_tokens);
        for (const gguf::Value& score : scores->array) vocab.scores.push_back(static_cast<float>(score.real));
    }
    if (const gguf::Value* merges = find_array(file, "tokenizer.ggml.merges", is_string)) {
        vocab.merges.reserve(merges->array.size());
        for (const gguf::Value& merge : merges->array) vocab.merges.push_back(merge.string);
    }

    // Defaults as llama.cpp's llama_vocab::load sets them before reading the optional keys.
    const bool sentencepiece = vocab.model == "llama";
    const bool llama3 = vocab.pre == "llama-bpe" || vocab.pre == "llama3" || vocab.pre == "llama-v3";
    std::vector<std::string>& warnings = vocab.warnings;
    vocab.bos_id = token_id(file, "tokenizer.ggml.bos_token_id", sentencepiece ? 1 : -1, n_tokens, warnings,
                            "prompts start without a BOS token");
    vocab.eos_id = token_id(file, "tokenizer.ggml.eos_token_id", sentencepiece ? 2 : -1, n_tokens, warnings,
                            "generation does not stop at an end-of-sequence token");
    vocab.unk_id = token_id(file, "tokenizer.ggml.unknown_token_id", sentencepiece ? 0 : -1, n_tokens, warnings);
    vocab.pad_id = token_id(file, "tokenizer.ggml.padding_token_id", -1, n_tokens, warnings);
    vocab.eot_id = token_id(file, "tokenizer.ggml.eot_token_id", -1, n_tokens, warnings,
                            "generation does not stop at an end-of-turn token");
    vocab.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(sentencepiece || llama3);
    vocab.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
    vocab.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(sentencepiece);
    vocab.hf_merge_by_rank = file.get_bool("tokenizer.ggml.hf_merge_by_rank").value_or(false);
    vocab.hf_metaspace = file.get_string("tokenizer.ggml.hf_metaspace").value_or("");
    vocab.hf_metaspace_split = file.get_bool("tokenizer.ggml.hf_metaspace_split").value_or(false);
    vocab.hf_decode_strip_space = file.get_bool("tokenizer.ggml.hf_decode_strip_space").value_or(false);

    // Per-token attributes GGUF does not store, set by model name as llama.cpp's llama_vocab::load
    // does. Phi-3's tokenizer_config.json has rstrip on </s> and on every special token but <unk>, <s>
    // and <|endoftext|>; llama.cpp marks all its control, user-defined and unknown tokens but those.
    std::string name = file.get_string("general.name").value_or("");
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
        for (size_t id = 0; id < vocab.token_types.size(); ++id) {
            const auto type = static_cast<TokenType>(vocab.token_types[id]);
            const std::string& text = vocab.tokens[id];
            if (type != TokenType::control && type != TokenType::user_defined && type != TokenType::unknown) continue;
            if (text == "<unk>" || text == "<s>" || text == "<|endoftext|>") continue;
            vocab.rstrip_ids.push_back(static_cast<int32_t>(id));
        }
    }
    return vocab;
}

}  // namespace kvstash
