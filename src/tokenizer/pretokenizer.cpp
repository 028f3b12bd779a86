#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "base/utf8.h"
#include "kvstash/error.h"

namespace kvstash::tokenization {
namespace {

// GPT-2's pattern as HF's ByteLevel(use_regex=true) writes it (llama.cpp drops the final `|\s+`,
// which changes nothing since gaps are kept).
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3's tokenizer.json Split pattern (numbers in runs of up to three digits).
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2's tokenizer.json Split pattern (single digits).
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// HF Digits(individual_digits=true): every numeric character (Rust char::is_numeric = \p{N}) alone.
constexpr const char* kEachDigit = R"(\p{N})";

struct Preset {
    const char* name;
    std::array<const char*, 2> patterns;  // stages in order; nullptr ends the list
    bool ignore_merges;
    bool normalize_nfc;
};

constexpr Preset kPresets[] = {
    {"default", {kGpt2, nullptr}, false, false},
    {"gpt2", {kGpt2, nullptr}, false, false},
    {"gpt-2", {kGpt2, nullptr}, false, false},  // spelling written by gguf-py / llama.cpp's converter for GPT-2
    {"llama-bpe", {kLlama3, nullptr}, true, false},
    {"llama3", {kLlama3, nullptr}, true, false},
    {"llama-v3", {kLlama3, nullptr}, true, false},
    // Qwen2's tokenizer.json: normalizer NFC, then the Split pattern.
    {"qwen2", {kQwen2, nullptr}, false, true},
    // SmolLM (1, 2): tokenizer.json pre_tokenizer = Sequence[Digits(individual_digits=true),
    // ByteLevel(add_prefix_space=false, use_regex=true)]; llama.cpp LLAMA_VOCAB_PRE_TYPE_SMOLLM.
    {"smollm", {kEachDigit, kGpt2}, false, false},
};

}  // namespace

struct PreTokenizer::Stage {
    pcre2_code* code = nullptr;
    explicit Stage(const char* pattern) {
        int error_code = 0;
        PCRE2_SIZE error_offset = 0;
        code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code, &error_offset, nullptr);
        if (code == nullptr) {
            std::array<PCRE2_UCHAR, 256> message{};
            pcre2_get_error_message(error_code, message.data(), message.size());
            throw Error(ErrorCode::internal, std::string("pre-tokenizer pattern does not compile at offset ") +
                                                 std::to_string(error_offset) + ": " +
                                                 reinterpret_cast<const char*>(message.data()));
        }
        // JIT is an optimisation only: without it (unsupported CPU) the interpreter gives the same matches.
        pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    }
    ~Stage() { pcre2_code_free(code); }
    Stage(const Stage&) = delete;
    Stage& operator=(const Stage&) = delete;

    // Appends the matches of this stage in `text` and the gaps between them.
    void split(std::string_view text, pcre2_match_data* match, std::vector<std::string_view>& out) const {
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        size_t gap_start = 0;
        size_t search = 0;
        while (search < text.size()) {
            const int rc = pcre2_match(code, subject, text.size(), search, 0, match, nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                std::array<PCRE2_UCHAR, 256> message{};
                pcre2_get_error_message(rc, message.data(), message.size());
                throw Error(ErrorCode::internal, std::string("pre-tokenizer match failed: ") +
                                                     reinterpret_cast<const char*>(message.data()));
            }
            const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
            const size_t begin = ovector[0];
            const size_t end = ovector[1];
            if (end <= begin) {  // an empty match makes no piece; step over one character
                const size_t len = utf8::sequence_length(text, begin);
                search = begin + (len == 0 ? 1 : len);
                continue;
            }
            if (begin > gap_start) out.push_back(text.substr(gap_start, begin - gap_start));
            out.push_back(text.substr(begin, end - begin));
            gap_start = search = end;
        }
        if (gap_start < text.size()) out.push_back(text.substr(gap_start));
    }
};

PreTokenizer::PreTokenizer(std::string_view name) {
    for (const Preset& preset : kPresets) {
        if (name != preset.name) continue;
        for (const char* pattern : preset.patterns) {
            if (pattern != nullptr) stages_.push_back(std::make_unique<Stage>(pattern));
        }
        ignore_merges_ = preset.ignore_merges;
        normalize_nfc_ = preset.normalize_nfc;
        return;
    }
    std::string known;
    for (const std::string& n : known_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorCode::unsupported, "unknown byte-level pre-tokenizer '" + std::string(name) +
                                            "' (tokenizer.ggml.pre); kvstash knows: " + known);
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::known_names() {
    std::vector<std::string> names;
    for (const Preset& preset : kPresets) names.emplace_back(preset.name);
    return names;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
    if (text.empty()) return;
    std::vector<std::string_view> current{text};
    std::vector<std::string_view> next;
    for (size_t i = 0; i < stages_.size(); ++i) {
        const Stage& stage = *stages_[i];
        pcre2_match_data* match = pcre2_match_data_create_from_pattern(stage.code, nullptr);
        if (match == nullptr) throw Error(ErrorCode::internal, "out of memory for pre-tokenizer match data");
        std::vector<std::string_view>& out = (i + 1 == stages_.size()) ? pieces : next;
        try {
            for (std::string_view piece : current) stage.split(piece, match, out);
        } catch (...) {
            pcre2_match_data_free(match);
            throw;
        }
        pcre2_match_data_free(match);
        if (&out == &next) {
            current.swap(next);
            next.clear();
        }
    }
}

}  // namespace kvstash::tokenization
