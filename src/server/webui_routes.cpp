// The web page: GET / (index.html) and GET /webui/<file> (its script and style sheet), from the bytes
// compiled into the binary (server/webui_assets.h). Exact paths only, so no API route is shadowed;
// anything else under /webui/ is the usual JSON 404.
#include <string_view>

#include "server/routes.h"
#include "server/webui_assets.h"

namespace kvstash::server {
namespace {

const char* content_type_for(std::string_view name) {
    if (name.ends_with(".html")) return "text/html; charset=utf-8";
    if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
    if (name.ends_with(".css")) return "text/css; charset=utf-8";
    if (name.ends_with(".svg")) return "image/svg+xml";
    if (name.ends_with(".png")) return "image/png";
    return "application/octet-stream";
}

// Whether the client's cached copy (If-None-Match: a list of ETags, or *) is the current one.
bool client_has(const httplib::Request& req, std::string_view etag) {
    if (!req.has_header("If-None-Match")) return false;
    const std::string wanted = req.get_header_value("If-None-Match");
    return wanted == "*" || wanted.find(etag) != std::string::npos;
}

}  // namespace

bool is_webui_path(const std::string& path) {
    for (const WebAsset& asset : webui_assets())
        if (path == asset.path) return true;
    return false;
}

void register_webui_routes(httplib::Server& http) {
    for (const WebAsset& asset : webui_assets()) {
        http.Get(asset.path, [&asset](const httplib::Request& req, httplib::Response& res) {
            // no-cache: the browser may keep a copy but asks each time (a 304 when the ETag still
            // matches), so a new server build is never hidden behind a stale page.
            res.set_header("Cache-Control", "no-cache");
            res.set_header("ETag", asset.etag);
            res.set_header("X-Content-Type-Options", "nosniff");
            // The page talks to this server only: no CDN, no other origin, no inline script.
            res.set_header("Content-Security-Policy",
                           "default-src 'self'; img-src 'self' data: blob:; object-src 'none'; "
                           "base-uri 'none'; frame-ancestors 'none'");
            if (client_has(req, asset.etag)) {
                res.status = 304;
                return;
            }
            res.set_content(reinterpret_cast<const char*>(asset.data), asset.size, content_type_for(asset.name));
        });
    }
}

}  // namespace kvstash::server
