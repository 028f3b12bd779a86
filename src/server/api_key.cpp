#include "server/api_key.h"

#include <cstdint>

namespace kvstash::server {

bool equal_in_constant_time(std::string_view presented, std::string_view key) {
    if (key.empty()) return false;
    // Every byte of `presented` is compared (against the key, repeated): no early exit, no branch on a byte.
    volatile uint8_t differ = presented.size() == key.size() ? 0 : 1;
    for (size_t i = 0; i < presented.size(); ++i) {
        differ = static_cast<uint8_t>(differ |
                                      (static_cast<uint8_t>(presented[i]) ^ static_cast<uint8_t>(key[i % key.size()])));
    }
    return differ == 0;
}

bool api_key_presented(const std::string& authorization, const std::string& x_api_key, const std::string& key) {
    bool ok = false;
    constexpr std::string_view kScheme = "bearer";
    if (authorization.size() > kScheme.size()) {
        bool scheme = true;
        for (size_t i = 0; i < kScheme.size(); ++i) {
            const char c = authorization[i];
            scheme = scheme && (c == kScheme[i] || c == kScheme[i] - 'a' + 'A');
        }
        size_t start = kScheme.size();
        if (scheme && authorization[start] == ' ') {
            while (start < authorization.size() && authorization[start] == ' ') ++start;
            ok = equal_in_constant_time(std::string_view(authorization).substr(start), key);
        }
    }
    if (!x_api_key.empty()) ok = equal_in_constant_time(x_api_key, key) || ok;
    return ok;
}

}  // namespace kvstash::server
