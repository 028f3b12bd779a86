#include "tokenizer/vocabulary_hf.h"

#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "kvstash/error.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocabulary.h"
#include "tokenizer/vocabulary_hf_spm.h"

namespace kvstash {
namespace {

using nlohmann::json;

// tokenizer.json pre-tokenizer regexes of the byte-level families, and the tokenizer.ggml.pre name llama.cpp's
// converter writes for each (its hash table, convert_hf_to_gguf_update.py).
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string pre_tokenizer_name(const json& pre, const std::string& path) {
    auto fail = [&](const std::string& what) -> std::string {
        throw Error(ErrorCode::unsupported, path + ": tokenizer.json pre-tokenizer " + what +
                                                " is not one kvstash recognises (byte-level GPT-2, Llama 3, Qwen2)");
    };
    if (!pre.is_object()) return fail("(none)");
    const std::string type = pre.value("type", "");
    if (type == "ByteLevel") {
        if (!pre.value("use_regex", true)) return fail("ByteLevel without regex");
        return "gpt-2";
    }
    if (type == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array()) {
        const json& parts = pre["pretokenizers"];
        if (parts.size() == 2 && parts[0].value("type", "") == "Split" && parts[1].value("type", "") == "ByteLevel" &&
            !parts[1].value("use_regex", true)) {
            const json& pattern = parts[0].contains("pattern") ? parts[0]["pattern"] : json();
            const std::string regex = pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()
                                          ? pattern["Regex"].get<std::string>()
                                          : "";
            if (regex == kLlama3Regex) return "llama-bpe";
            if (regex == kQwen2Regex) return "qwen2";
            return fail("Split regex '" + regex.substr(0, 60) + "'");
        }
    }
    return fail("'" + type + "'");
}

// The converter's does_token_look_special.
bool looks_special(const std::string& t) {
    auto ends = [&](const std::string& s) {
        return t.size() >= s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0;
    };
    auto starts = [&](const std::string& s) { return t.rfind(s, 0) == 0; };
    if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
    if (starts("<|") && ends("|>")) return true;
    if (starts("<\xEF\xBD\x9C") && ends("\xEF\xBD\x9C>")) return true;  // <｜ ... ｜>
    return starts("<unused") && ends(">");
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
        s.replace(pos, from.size(), to);
    return s;
}

struct AddedToken {
    int64_t id;
    std::string content;
    bool special;
};

gguf::Metadata metadata_from_hf(const json& tok, const json* tcfg, const json& config,
                                const std::optional<std::string>& chat_template_jinja, const std::string& path) {
    auto bad = [&](const std::string& what) { return Error(ErrorCode::bad_format, path + ": tokenizer.json " + what); };
    if (!tok.is_object() || !tok.contains("model") || !tok["model"].is_object()) throw bad("has no 'model' object");
    const json& model = tok["model"];
    const bool sentencepiece = is_sentencepiece_bpe(model);
    if (model.value("type", "") != "BPE") {
        throw Error(ErrorCode::unsupported, path + ": tokenizer.json model '" + model.value("type", "?") +
                                                "' is not supported in a model directory (BPE only: byte-level, or "
                                                "SentencePiece-style with byte fallback); convert it to GGUF");
    }
    if (!model.contains("vocab") || !model["vocab"].is_object()) throw bad("model has no 'vocab' object");
    const std::string pre =
        sentencepiece ? "" : pre_tokenizer_name(tok.contains("pre_tokenizer") ? tok["pre_tokenizer"] : json(), path);

    std::map<int64_t, std::string> by_id;
    for (const auto& [text, id] : model["vocab"].items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0) throw bad("vocab id of '" + text + "' is not an id");
        by_id[id.get<int64_t>()] = text;
    }
    std::vector<AddedToken> added;
    if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
        for (const json& a : tok["added_tokens"]) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
                !a["content"].is_string() || a["id"].get<int64_t>() < 0) {
                throw bad("has a malformed added_tokens entry");
            }
            added.push_back({a["id"].get<int64_t>(), a["content"].get<std::string>(), a.value("special", false)});
            by_id[added.back().id] = added.back().content;
        }
    }
    std::map<std::string, const AddedToken*> added_by_content;
    for (const AddedToken& a : added) added_by_content.emplace(a.content, &a);

    int64_t n_vocab = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
    if (auto v = config.find("vocab_size"); v != config.end() && v->is_number_integer()) {
        if (v->get<int64_t>() < n_vocab) throw bad("has ids past config.json's vocab_size");
        n_vocab = v->get<int64_t>();
    }
    if (n_vocab <= 0 || n_vocab > (int64_t{1} << 24)) throw bad("has no tokens or too many");
    const std::string unk =
        model.contains("unk_token") && model["unk_token"].is_string() ? model["unk_token"].get<std::string>() : "";
    std::vector<std::string> texts;
    std::vector<gguf::Value> types;
    for (int64_t i = 0; i < n_vocab; ++i) {
        auto it = by_id.find(i);
        std::string text;
        TokenType type = TokenType::normal;
        if (it == by_id.end()) {
            text = "[PAD" + std::to_string(i) + "]";
            type = TokenType::unused;
        } else {
            text = it->second;
            const auto a = added_by_content.find(text);
            if (sentencepiece) {
                // tokenizers matches every added token in the text (special ones too) and only added ones.
                if (a != added_by_content.end()) {
                    type = text == unk ? TokenType::unknown
                                       : (a->second->special ? TokenType::control : TokenType::user_defined);
                } else if (tokenization::SentencePieceEncoder::parse_byte_token(text) >= 0) {
                    type = TokenType::byte;
                }
            } else if (a != added_by_content.end()) {
                if (a->second->special || looks_special(text)) {
                    type = TokenType::control;
                } else {
                    text = replace_all(text, "\xE2\x96\x81", " ");
                    type = TokenType::user_defined;
                }
            }
        }
        texts.push_back(std::move(text));
        types.push_back(gguf::i32_value(static_cast<int32_t>(type)));
    }

    gguf::Metadata m;
    if (sentencepiece) m = sentencepiece_keys_from_hf(tok, texts, path);
    std::vector<gguf::Value> tokens;
    for (std::string& text : texts) tokens.push_back(gguf::string_value(std::move(text)));
    if (!sentencepiece) {
        m.emplace_back("tokenizer.ggml.model", gguf::string_value("gpt2"));
        m.emplace_back("tokenizer.ggml.pre", gguf::string_value(pre));
    }
    m.emplace_back("tokenizer.ggml.tokens", gguf::array_value(gguf::ValueType::STRING, std::move(tokens)));
    m.emplace_back("tokenizer.ggml.token_type", gguf::array_value(gguf::ValueType::INT32, std::move(types)));

    std::vector<gguf::Value> merges;
    if (!sentencepiece && model.contains("merges") && model["merges"].is_array()) {
        for (const json& mg : model["merges"]) {
            if (mg.is_string()) {
                merges.push_back(gguf::string_value(mg.get<std::string>()));
            } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
                // Spaces inside a part are written as U+0120 ('Ġ' = ' ' + 256), as gguf-py does.
                merges.push_back(gguf::string_value(replace_all(mg[0].get<std::string>(), " ", "\xC4\xA0") + " " +
                                                    replace_all(mg[1].get<std::string>(), " ", "\xC4\xA0")));
            } else {
                throw bad("has a merge that is neither \"a b\" nor [a, b]");
            }
        }
    }
    if (!merges.empty())
        m.emplace_back("tokenizer.ggml.merges", gguf::array_value(gguf::ValueType::STRING, std::move(merges)));

    // SpecialVocab: ids from tokenizer_config's <typ>_token (first added token with that content), then
    // config.json's <typ>_token_id; add_<typ>_token from the post-processor, then tokenizer_config.
    static const std::pair<const char*, const char*> kSpecial[] = {
        {"bos", "bos_token_id"},       {"eos", "eos_token_id"},     {"unk", "unknown_token_id"},
        {"sep", "seperator_token_id"}, {"pad", "padding_token_id"}, {"cls", "cls_token_id"},
        {"mask", "mask_token_id"}};
    std::map<std::string, int64_t> ids;
    std::map<std::string, bool> add;
    auto content_of = [](const json* cfg, const std::string& key) -> std::optional<std::string> {
        if (!cfg || !cfg->is_object() || !cfg->contains(key)) return std::nullopt;
        const json& e = (*cfg)[key];
        if (e.is_string()) return e.get<std::string>();
        if (e.is_object() && e.contains("content") && e["content"].is_string()) return e["content"].get<std::string>();
        return std::nullopt;
    };
    if (tok.contains("post_processor") && tok["post_processor"].is_object()) {
        const json& pp = tok["post_processor"];
        const json procs =
            pp.contains("processors") && pp["processors"].is_array() ? pp["processors"] : json::array({pp});
        const auto bos = content_of(tcfg, "bos_token");
        const auto eos = content_of(tcfg, "eos_token");
        for (const json& p : procs) {
            const std::string type = p.value("type", "");
            if (type == "ByteLevel") {
                add.emplace("bos", false);
                add.emplace("eos", false);
            } else if (type == "TemplateProcessing" && p.contains("single") && p["single"].is_array() &&
                       p["single"].size() > 1) {
                const json& single = p["single"];
                auto special_id = [](const json& e) -> std::optional<std::string> {
                    if (e.contains("SpecialToken") && e["SpecialToken"].contains("id")) {
                        return e["SpecialToken"]["id"].get<std::string>();
                    }
                    return std::nullopt;
                };
                if (sentencepiece) {
                    // tokenizers adds the template's own tokens, whatever tokenizer_config.json names.
                    const auto id_of = [&](const std::string& text) -> std::optional<int64_t> {
                        for (const auto& [id, t] : by_id) {
                            if (t == text && id < n_vocab) return id;
                        }
                        return std::nullopt;
                    };
                    if (auto first = special_id(single.front()); first && id_of(*first)) {
                        add["bos"] = true;
                        ids["bos"] = *id_of(*first);
                    }
                    if (auto last = special_id(single.back()); last && id_of(*last)) {
                        add["eos"] = true;
                        ids["eos"] = *id_of(*last);
                    }
                } else {
                    if (auto first = special_id(single.front())) add["bos"] = bos && *first == *bos;
                    if (auto last = special_id(single.back())) add["eos"] = eos && *last == *eos;
                }
            } else if (type == "RobertaProcessing") {
                throw Error(ErrorCode::unsupported, path + ": RobertaProcessing tokenizers are not supported");
            }
        }
    }
    for (const auto& [typ, key] : kSpecial) {
        const std::string t = typ;
        if (tcfg && tcfg->is_object()) {
            if (auto a = tcfg->find("add_" + t + "_token"); a != tcfg->end() && a->is_boolean())
                add.emplace(t, a->get<bool>());
        }
        if (auto c = content_of(tcfg, t + "_token")) {
            for (const AddedToken& a : added) {
                if (a.content == *c) {
                    if (a.id < n_vocab) ids.emplace(t, a.id);
                    break;
                }
            }
        }
    }
    const json* text_config = config.contains("text_config") ? &config["text_config"] : nullptr;
    for (const auto& [typ, key] : kSpecial) {
        const std::string t = typ;
        const json* v = config.contains(t + "_token_id") ? &config[t + "_token_id"] : nullptr;
        if ((!v || v->is_null()) && text_config && text_config->contains(t + "_token_id"))
            v = &(*text_config)[t + "_token_id"];
        if (v && v->is_number_integer() && v->get<int64_t>() >= 0 && v->get<int64_t>() < n_vocab)
            ids.emplace(t, v->get<int64_t>());
    }
    if (sentencepiece) {
        // vocabulary_from_gguf's SentencePiece defaults (unk 0, bos 1, eos 2, add_bos) are llama.cpp's, not
        // tokenizers': unk is the model's, and a BOS/EOS is added only where the post-processor says.
        for (const auto& [id, text] : by_id) {
            if (!unk.empty() && text == unk && id < n_vocab) {
                ids.emplace("unk", id);
                break;
            }
        }
        add.emplace("bos", false);
        add.emplace("eos", false);
    }
    for (const auto& [typ, key] : kSpecial) {
        if (auto it = ids.find(typ); it != ids.end()) {
            m.emplace_back(std::string("tokenizer.ggml.") + key, gguf::u32_value(static_cast<uint32_t>(it->second)));
        }
    }
    for (const auto& [typ, value] : add)
        m.emplace_back("tokenizer.ggml.add_" + typ + "_token", gguf::bool_value(value));

    std::optional<std::string> chat_template = chat_template_jinja;
    if (tcfg && tcfg->is_object() && tcfg->contains("chat_template")) {
        const json& ct = (*tcfg)["chat_template"];
        if (ct.is_string()) {
            chat_template = ct.get<std::string>();
        } else if (ct.is_array()) {
            for (const json& named : ct) {
                if (named.is_object() && named.value("name", "") == "default" && named.contains("template")) {
                    chat_template = named["template"].get<std::string>();
                }
            }
        }
    }
    if (chat_template) m.emplace_back("tokenizer.chat_template", gguf::string_value(*chat_template));
    return m;
}

}  // namespace

gguf::Metadata tokenizer_metadata_from_hf(const json& tok, const json* tcfg, const json& config,
                                          const std::optional<std::string>& chat_template_jinja,
                                          const std::string& path) {
    try {
        return metadata_from_hf(tok, tcfg, config, chat_template_jinja, path);
    } catch (const json::exception& e) {
        // A field of an unexpected JSON type (json::value and get throw on those).
        throw Error(ErrorCode::bad_format, path + ": tokenizer.json or tokenizer_config.json: " + e.what());
    }
}

}  // namespace kvstash
