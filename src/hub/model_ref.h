// What a user names when fetching a model ("owner/name", "owner/name:Q8_0", "owner/name:sub/file.gguf"),
// and which of a repository's files that means: a GGUF file (the quantization asked for, else Q4_K_M),
// or, in a repository without GGUF files, a whole Hugging Face model directory (config, safetensors
// shards and their index, tokenizer files).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash::hub {

struct ModelRef {
    std::string repo;      // "owner/name"
    std::string selector;  // empty, a quantization ("Q4_K_M", any case) or a file path in the repository
};

// "owner/name[:SELECTOR]", with an optional "hf:" in front. Throws Error(invalid_argument) saying what a
// repository name looks like.
ModelRef parse_model_ref(std::string_view text);

// One file of a repository at a commit.
struct RepoFile {
    std::string path;  // relative, '/'-separated
    uint64_t size = 0;
    std::string oid;  // what names its blob and verifies it: the LFS sha256, else Git's blob sha1 (empty offline)
};

struct Selection {
    std::vector<RepoFile> files;  // to fetch
    std::string model_path;       // the GGUF to load (relative), or empty: the directory is the model
};

// The quantization the user gets when naming none.
inline constexpr std::string_view kDefaultQuant = "Q4_K_M";

// Throws Error(io) naming the repository and what it holds when nothing matches (the file or quantization
// is not there, several files match, the repository has no model files).
Selection select_model_files(const std::vector<RepoFile>& files, const ModelRef& ref);

}  // namespace kvstash::hub
