#include "support/paths.h"

#include <cstdlib>
#include <filesystem>

namespace kvstash::test {

// KVSTASH_TEST_SOURCE_DIR, where set, names the tree instead of the one built from: test binaries carried to another
// machine (scripts/amx_pack.sh) find the fixtures in the copy of the tree there.
std::string source_dir() {
    if (const char* env = std::getenv("KVSTASH_TEST_SOURCE_DIR"); env && *env) return env;
    return KVSTASH_SOURCE_DIR;
}

std::string fixture_path(const std::string& relative) { return source_dir() + "/tests/fixtures/" + relative; }

std::string default_model_path() {
    if (const char* env = std::getenv("KVSTASH_MODEL"); env && *env) return env;
    return source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

ModelStatus default_model_status() {
    if (const char* skip = std::getenv("KVSTASH_SKIP_DEFAULT_MODEL_TESTS"); skip && std::string(skip) == "1") {
        return ModelStatus::skipped;
    }
    if (std::filesystem::exists(default_model_path())) return ModelStatus::present;
    const char* allow = std::getenv("KVSTASH_ALLOW_NO_MODEL");
    return (allow && std::string(allow) == "1") ? ModelStatus::missing_allowed : ModelStatus::missing;
}

std::string cli_path() { return KVSTASH_CLI_PATH; }

}  // namespace kvstash::test
