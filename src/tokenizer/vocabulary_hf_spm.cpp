#include "tokenizer/vocabulary_hf_spm.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "kvstash/error.h"
#include "tokenizer/spm.h"

namespace kvstash {
namespace {

using nlohmann::json;

constexpr const char* kSpaceMark = "\xE2\x96\x81";  // U+2581 '▁'

std::string type_of(const json& j) { return j.is_object() ? j.value("type", "?") : std::string("(none)"); }

// A Replace(pattern String `from` -> `to`) normalizer or decoder.
bool is_replace(const json& j, const std::string& from, const std::string& to) {
    if (!j.is_object() || j.value("type", "") != "Replace" || !j.contains("pattern")) return false;
    const json& p = j["pattern"];
    return p.is_object() && p.contains("String") && p["String"] == from && j.value("content", "") == to;
}

// The normalizer's steps as a list (a Sequence's, or the one normalizer; none for null).
std::vector<json> steps_of(const json& j, const char* list_key) {
    if (j.is_null()) return {};
    if (j.is_object() && j.value("type", "") == "Sequence" && j.contains(list_key) && j[list_key].is_array())
        return j[list_key].get<std::vector<json>>();
    return {j};
}

}  // namespace

bool is_sentencepiece_bpe(const json& model) {
    return model.is_object() && model.value("type", "") == "BPE" && model.value("byte_fallback", false);
}

gguf::Metadata sentencepiece_keys_from_hf(const json& tok, const std::vector<std::string>& tokens,
                                          const std::string& path) {
    const auto refuse = [&](const std::string& what) {
        return Error(ErrorCode::unsupported, path + ": SentencePiece-style tokenizer.json with " + what +
                                                 " is not supported in a model directory; convert the model to GGUF");
    };
    const auto bad = [&](const std::string& what) {
        return Error(ErrorCode::bad_format, path + ": tokenizer.json " + what);
    };
    const json& model = tok["model"];
    for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
        if (model.contains(key) && !model[key].is_null() && model[key] != "" && model[key] != 0.0)
            throw refuse(std::string("model.") + key + " " + model[key].dump());
    }
    if (model.value("ignore_merges", false)) throw refuse("model.ignore_merges");

    // Normalizer and pre-tokenizer: where '▁' comes from.
    const json null_json;
    const json& normalizer = tok.contains("normalizer") ? tok["normalizer"] : null_json;
    const json& pre = tok.contains("pre_tokenizer") ? tok["pre_tokenizer"] : null_json;
    const std::vector<json> norm = steps_of(normalizer, "normalizers");
    bool replaces = false, prepends = false;
    if (norm.size() == 1 && is_replace(norm[0], " ", kSpaceMark)) {
        replaces = true;
    } else if (norm.size() == 2 && type_of(norm[0]) == "Prepend" && norm[0].value("prepend", "") == kSpaceMark &&
               is_replace(norm[1], " ", kSpaceMark)) {
        replaces = prepends = true;
    } else if (!norm.empty()) {
        std::string names;
        for (const json& n : norm) names += (names.empty() ? "" : ", ") + type_of(n);
        throw refuse("normalizer " + names);
    }
    std::string metaspace;
    bool metaspace_split = false;
    if (pre.is_null()) {
        if (!replaces) throw refuse("neither a Replace(\" \", \"▁\") normalizer nor a Metaspace pre-tokenizer");
    } else if (type_of(pre) == "Split" && pre.contains("pattern") && pre["pattern"].is_object() &&
               pre["pattern"].value("String", "") == " " && !pre.value("invert", false) && replaces) {
        // Gemma's: after the normalizer there is no ' ' left to split on.
    } else if (type_of(pre) == "Metaspace" && !prepends) {
        if (pre.value("replacement", "") != kSpaceMark) throw refuse("a Metaspace replacement other than '▁'");
        metaspace = pre.contains("prepend_scheme") ? pre.value("prepend_scheme", "")
                                                   : (pre.value("add_prefix_space", true) ? "always" : "never");
        if (metaspace != "always" && metaspace != "first" && metaspace != "never")
            throw refuse("Metaspace prepend_scheme '" + metaspace + "'");
        metaspace_split = pre.value("split", true);
    } else {
        throw refuse("pre_tokenizer " + type_of(pre) + (replaces ? " after a Replace normalizer" : ""));
    }

    // Decoder: spaces back, byte tokens fused into bytes, and maybe one leading space stripped.
    const json& decoder = tok.contains("decoder") ? tok["decoder"] : null_json;
    const std::vector<json> dec = steps_of(decoder, "decoders");
    bool strip = false;
    const bool standard = dec.size() >= 3 && is_replace(dec[0], kSpaceMark, " ") && type_of(dec[1]) == "ByteFallback" &&
                          type_of(dec[2]) == "Fuse";
    if (standard && dec.size() == 4 && type_of(dec[3]) == "Strip" && dec[3].value("content", "") == " " &&
        dec[3].value("start", 0) == 1 && dec[3].value("stop", 0) == 0) {
        strip = true;
    } else if (!standard || dec.size() != 3) {
        std::string names;
        for (const json& d : dec) names += (names.empty() ? "" : ", ") + type_of(d);
        throw refuse("decoder " + (names.empty() ? std::string("(none)") : names));
    }

    if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
        for (const json& a : tok["added_tokens"]) {
            for (const char* flag : {"normalized", "lstrip", "rstrip", "single_word"}) {
                if (a.value(flag, false))
                    throw refuse("added token '" + a.value("content", "") + "' with " + flag + " set");
            }
        }
    }

    std::unordered_map<std::string, int32_t> ids;
    std::vector<bool> have_byte(256, false);
    for (size_t i = 0; i < tokens.size(); ++i) {
        ids.emplace(tokens[i], static_cast<int32_t>(i));
        const int byte = tokenization::SentencePieceEncoder::parse_byte_token(tokens[i]);
        if (byte >= 0) have_byte[byte] = true;
    }
    for (int b = 0; b < 256; ++b) {
        if (!have_byte[b])
            throw refuse("byte fallback but no <0x" + std::string(1, "0123456789ABCDEF"[b >> 4]) +
                         std::string(1, "0123456789ABCDEF"[b & 15]) + "> token");
    }

    // Merges "left right" by rank, and scores from the first merge that makes each token.
    std::vector<gguf::Value> merges, scores(tokens.size(), gguf::f32_value(0.0f));
    std::vector<bool> scored(tokens.size(), false);
    if (model.contains("merges") && model["merges"].is_array()) {
        for (const json& mg : model["merges"]) {
            std::string left, right;
            if (mg.is_string()) {
                const std::string s = mg.get<std::string>();
                const size_t space = s.find(' ');
                if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
                    throw bad("has a merge '" + s + "' that is not two parts separated by one space");
                left = s.substr(0, space);
                right = s.substr(space + 1);
            } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
                left = mg[0].get<std::string>();
                right = mg[1].get<std::string>();
                // A part with a space never applies: the text reaching the model has '▁' for every space.
                if (left.find(' ') != std::string::npos || right.find(' ') != std::string::npos) continue;
            } else {
                throw bad("has a merge that is neither \"a b\" nor [a, b]");
            }
            const auto made = ids.find(left + right);
            if (!ids.count(left) || !ids.count(right) || made == ids.end())
                throw bad("merge '" + left + " " + right + "' names a token that is not in the vocabulary");
            if (!scored[made->second]) {
                scored[made->second] = true;
                scores[made->second] = gguf::f32_value(-1.0f - static_cast<float>(merges.size()));
            }
            merges.push_back(gguf::string_value(left + " " + right));
        }
    }

    gguf::Metadata m;
    m.emplace_back("tokenizer.ggml.model", gguf::string_value("llama"));
    m.emplace_back("tokenizer.ggml.pre", gguf::string_value("default"));
    m.emplace_back("tokenizer.ggml.scores", gguf::array_value(gguf::ValueType::FLOAT32, std::move(scores)));
    if (!merges.empty())
        m.emplace_back("tokenizer.ggml.merges", gguf::array_value(gguf::ValueType::STRING, std::move(merges)));
    m.emplace_back("tokenizer.ggml.add_space_prefix",
                   gguf::bool_value(prepends || metaspace == "always" || metaspace == "first"));
    m.emplace_back("tokenizer.ggml.hf_merge_by_rank", gguf::bool_value(true));
    if (!metaspace.empty()) {
        m.emplace_back("tokenizer.ggml.hf_metaspace", gguf::string_value(metaspace));
        m.emplace_back("tokenizer.ggml.hf_metaspace_split", gguf::bool_value(metaspace_split));
    }
    m.emplace_back("tokenizer.ggml.hf_decode_strip_space", gguf::bool_value(strip));
    return m;
}

}  // namespace kvstash
