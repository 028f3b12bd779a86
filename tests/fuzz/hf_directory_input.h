// A fuzzed config.json through the whole model-directory reader (Model::load of a directory: config.json,
// then the safetensors and tokenizer it describes), for fuzz_structured and unit_hostile_input's seeds.
// The other files are the committed tiny Llama's (tests/fixtures/hf/llama_f32), linked once into a
// directory of this process's own; each input rewrites only config.json. An Error is an answer.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kvstash/model.h"

namespace kvstash::fuzz {

// The directory (made on the first call; remove it when done, as unit_hostile_input does).
inline const std::filesystem::path& hf_fuzz_directory(const std::string& source_dir) {
    namespace fs = std::filesystem;
    static const fs::path dir = [&] {
        const fs::path d = fs::temp_directory_path() / ("kvstash_fuzz_hf_dir_" + std::to_string(getpid()));
        fs::create_directories(d);
        const fs::path fixture = fs::path(source_dir) / "tests/fixtures/hf/llama_f32";
        for (const char* name : {"model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
            std::error_code ignored;
            fs::remove(d / name, ignored);
            fs::create_symlink(fixture / name, d / name);
        }
        return d;
    }();
    return dir;
}

inline void load_hf_directory_with_config(const std::string& config_text, const std::string& source_dir) {
    const std::filesystem::path& dir = hf_fuzz_directory(source_dir);
    std::ofstream(dir / "config.json", std::ios::binary | std::ios::trunc) << config_text;
    (void)Model::load(dir.string());
}

}  // namespace kvstash::fuzz
