// The API key check of `serve --api-key` (docs/deploy.md, "API key"): a request presents the key as
// "Authorization: Bearer <key>" (the scheme name in any case, RFC 9110 §11.1) or as "X-Api-Key: <key>".
// The comparison takes the same time whatever prefix of the key is right, so the key cannot be guessed a
// byte at a time by timing answers.
#pragma once

#include <string>
#include <string_view>

namespace kvstash::server {

// True when `presented` equals `key`; its time depends on presented.size() only.
bool equal_in_constant_time(std::string_view presented, std::string_view key);

// True when the Authorization or X-Api-Key header value carries `key` (`key` non-empty).
bool api_key_presented(const std::string& authorization, const std::string& x_api_key, const std::string& key);

}  // namespace kvstash::server
