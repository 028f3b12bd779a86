// The web page's static files (webui/ in the source tree), compiled into the binary by
// cmake/embed_webui.cmake: no files to install, no CDN, and the page always matches the server.
#pragma once

#include <cstddef>
#include <span>

namespace kvstash::server {

struct WebAsset {
    const char* path;  // served path: "/" for index.html, "/webui/<name>" for the others
    const char* name;  // file name in webui/ (its extension gives the Content-Type)
    const unsigned char* data;
    size_t size;       // bytes
    const char* etag;  // quoted, e.g. "\"3f2a...\"": the first 16 hex digits of the file's SHA-256
};

std::span<const WebAsset> webui_assets();

}  // namespace kvstash::server
