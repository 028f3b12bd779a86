#include "hub/hub_settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

namespace kvstash::hub {
namespace {

std::string env(const char* name) {
    const char* value = std::getenv(name);
    return value ? value : "";
}

// huggingface_hub's _is_true: "1", "ON", "YES", "TRUE" in any case.
bool env_true(const char* name) {
    std::string value = env(name);
    std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::toupper(c); });
    return value == "1" || value == "ON" || value == "YES" || value == "TRUE";
}

std::string trim(std::string text) {
    const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
    while (!text.empty() && space(text.back())) text.pop_back();
    size_t start = 0;
    while (start < text.size() && space(text[start])) ++start;
    return text.substr(start);
}

}  // namespace

HubSettings HubSettings::from_environment() {
    HubSettings s;
    if (const std::string endpoint = env("HF_ENDPOINT"); !endpoint.empty()) s.endpoint = endpoint;
    while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();

    std::string home = env("HF_HOME");
    if (home.empty()) {
        const std::string xdg = env("XDG_CACHE_HOME");
        home = (xdg.empty() ? env("HOME") + "/.cache" : xdg) + "/huggingface";
    }
    s.cache_dir = env("HF_HUB_CACHE");
    if (s.cache_dir.empty()) s.cache_dir = env("HUGGINGFACE_HUB_CACHE");
    if (s.cache_dir.empty()) s.cache_dir = home + "/hub";

    s.token = trim(env("HF_TOKEN"));
    if (s.token.empty()) {
        std::string token_path = env("HF_TOKEN_PATH");
        if (token_path.empty()) token_path = home + "/token";
        std::ifstream file(token_path);
        std::string line;
        if (file && std::getline(file, line)) s.token = trim(line);
    }
    s.offline = env_true("HF_HUB_OFFLINE");
    return s;
}

}  // namespace kvstash::hub
