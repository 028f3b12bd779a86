#include "hub/model_ref.h"

#include <algorithm>
#include <cctype>

#include "kvstash/error.h"

namespace kvstash::hub {
namespace {

bool valid_name_part(std::string_view part) {
    if (part.empty() || part.size() > 96 || part.front() == '.' || part.front() == '-') return false;
    return std::all_of(part.begin(), part.end(),
                       [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '_' || c == '.'; });
}

std::string upper(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
    return out;
}

bool ends_with_ci(std::string_view text, std::string_view suffix) {
    return text.size() >= suffix.size() && upper(text.substr(text.size() - suffix.size())) == upper(suffix);
}

std::string_view file_name(std::string_view path) {
    const size_t slash = path.rfind('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Whether the GGUF file name carries the quantization `quant` as one of its dot- or dash-separated parts:
// "SmolLM2-135M-Instruct.Q4_1.gguf" has Q4_1, "gemma-3-270m-it-q4_k_m.gguf" has Q4_K_M, and neither has Q4_K.
bool has_quant(std::string_view path, std::string_view quant) {
    const std::string name = upper(file_name(path));
    const std::string q = upper(quant);
    for (size_t at = name.find(q); at != std::string::npos; at = name.find(q, at + 1)) {
        const bool starts = at == 0 || name[at - 1] == '-' || name[at - 1] == '.' || name[at - 1] == '_';
        const size_t end = at + q.size();
        const bool ends = end == name.size() || name[end] == '-' || name[end] == '.';
        if (starts && ends) return true;
    }
    return false;
}

// The files of a Hugging Face model directory that kvstash reads (model weights and tokenizer), top level only.
bool is_directory_file(std::string_view path) {
    if (path.find('/') != std::string_view::npos) return false;
    for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                             "special_tokens_map.json", "tokenizer.model", "chat_template.jinja", "chat_template.json",
                             "added_tokens.json", "vocab.json", "merges.txt"}) {
        if (path == name) return true;
    }
    return path.ends_with(".safetensors") || path.ends_with(".safetensors.index.json");
}

std::string list_names(const std::vector<const RepoFile*>& files) {
    std::string out;
    for (const RepoFile* f : files) out += (out.empty() ? "" : ", ") + f->path;
    return out;
}

}  // namespace

ModelRef parse_model_ref(std::string_view text) {
    if (text.starts_with("hf:")) text.remove_prefix(3);
    ModelRef ref;
    const size_t colon = text.find(':');
    const std::string_view repo = text.substr(0, colon);
    if (colon != std::string_view::npos) ref.selector = std::string(text.substr(colon + 1));
    const size_t slash = repo.find('/');
    if (slash == std::string_view::npos || !valid_name_part(repo.substr(0, slash)) ||
        !valid_name_part(repo.substr(slash + 1)) || (colon != std::string_view::npos && ref.selector.empty())) {
        throw Error(ErrorCode::invalid_argument,
                    "'" + std::string(text.substr(0, 200)) +
                        "' is not a hub repository: use OWNER/NAME, OWNER/NAME:QUANT (e.g. Q8_0) or "
                        "OWNER/NAME:FILE.gguf (letters, digits, '-', '_' and '.' in OWNER and NAME)");
    }
    ref.repo = std::string(repo);
    if (ref.selector.find("..") != std::string::npos || ref.selector.starts_with("/")) {
        throw Error(ErrorCode::invalid_argument, "'" + ref.selector + "' is not a file path inside a repository");
    }
    return ref;
}

Selection select_model_files(const std::vector<RepoFile>& files, const ModelRef& ref) {
    std::vector<const RepoFile*> ggufs;
    for (const RepoFile& f : files) {
        if (ends_with_ci(f.path, ".gguf")) ggufs.push_back(&f);
    }
    Selection out;
    const auto pick = [&out](const RepoFile& f) {
        out.files = {f};
        out.model_path = f.path;
        return out;
    };
    if (!ref.selector.empty()) {
        for (const RepoFile& f : files) {
            if (f.path == ref.selector) {
                if (!ends_with_ci(f.path, ".gguf")) {
                    throw Error(ErrorCode::io, "'" + f.path + "' in " + ref.repo +
                                                   " is not a GGUF file; name a .gguf file or a quantization, or "
                                                   "nothing for a model directory");
                }
                return pick(f);
            }
        }
    }
    const std::string quant = ref.selector.empty() ? std::string(kDefaultQuant) : ref.selector;
    if (!ggufs.empty()) {
        std::vector<const RepoFile*> matches;
        for (const RepoFile* f : ggufs) {
            if (has_quant(f->path, quant)) matches.push_back(f);
        }
        if (matches.size() == 1) return pick(*matches.front());
        if (ref.selector.empty() && ggufs.size() == 1) return pick(*ggufs.front());
        if (matches.size() > 1) {
            throw Error(ErrorCode::io, "several files in " + ref.repo + " match '" + quant +
                                           "': " + list_names(matches) + "; name one: " + ref.repo + ":FILE");
        }
        throw Error(ErrorCode::io, ref.repo + " has no GGUF file for '" + quant + "'; it has " + list_names(ggufs) +
                                       " (pull " + ref.repo + ":QUANT or " + ref.repo + ":FILE)");
    }
    if (!ref.selector.empty()) {
        throw Error(ErrorCode::io, ref.repo + " has no file '" + ref.selector +
                                       "' and no GGUF files; pull it without ':" + ref.selector +
                                       "' for its model directory");
    }
    bool has_config = false, has_weights = false;
    for (const RepoFile& f : files) {
        if (!is_directory_file(f.path)) continue;
        out.files.push_back(f);
        has_config |= f.path == "config.json";
        has_weights |= f.path.ends_with(".safetensors");
    }
    if (!has_config || !has_weights) {
        throw Error(ErrorCode::io, ref.repo +
                                       " has neither GGUF files nor a model directory (config.json and "
                                       "*.safetensors); kvstash cannot run it");
    }
    return out;
}

}  // namespace kvstash::hub
