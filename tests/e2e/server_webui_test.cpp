// The web page's files as `kvstash serve` sends them, without a browser (the browser test is
// tests/e2e/webui/webui_browser_test.py): the bytes equal webui/ in the source tree (the CMake embed
// step), Content-Type, Cache-Control, ETag and 304, no API key needed for them while the API keeps
// needing it, and no API route shadowed.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "e2e/server/http_client.h"

namespace kvstash::test {
namespace {

std::string source_file(const std::string& relative) {
    std::ifstream in(source_dir() + "/" + relative, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
}

TEST(ServerWebui, ServesTheSourceFilesWithCachingHeadersAndNoKey) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    ServerProcess server({"-t", "1", "--api-key", "sesame"});
    httplib::Client anonymous = server.client();
    const struct {
        const char* path;
        const char* file;
        const char* type;
    } assets[] = {{"/", "webui/index.html", "text/html; charset=utf-8"},
                  {"/webui/app.js", "webui/app.js", "text/javascript; charset=utf-8"},
                  {"/webui/style.css", "webui/style.css", "text/css; charset=utf-8"}};
    for (const auto& asset : assets) {
        SCOPED_TRACE(asset.path);
        auto r = anonymous.Get(asset.path);
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        EXPECT_EQ(r->body, source_file(asset.file));
        EXPECT_EQ(r->get_header_value("Content-Type"), asset.type);
        EXPECT_EQ(r->get_header_value("Cache-Control"), "no-cache");
        EXPECT_NE(r->get_header_value("Content-Security-Policy").find("default-src 'self'"), std::string::npos);
        const std::string etag = r->get_header_value("ETag");
        ASSERT_EQ(etag.size(), 18u) << etag;  // a quoted 16-digit hash
        auto cached = anonymous.Get(asset.path, {{"If-None-Match", etag}});
        ASSERT_TRUE(cached);
        EXPECT_EQ(cached->status, 304);
        EXPECT_TRUE(cached->body.empty());
        auto stale = anonymous.Get(asset.path, {{"If-None-Match", "\"0000000000000000\""}});
        ASSERT_TRUE(stale);
        EXPECT_EQ(stale->status, 200);
    }
    // The files differ, so do their ETags.
    EXPECT_NE(anonymous.Get("/")->get_header_value("ETag"), anonymous.Get("/webui/app.js")->get_header_value("ETag"));

    // The API is not shadowed and keeps its key; other paths under /webui/ are the JSON 404.
    for (const char* path : {"/v1/models", "/v1/states", "/metrics", "/webui/", "/index.html"})
        EXPECT_EQ(anonymous.Get(path)->status, 401) << path;
    httplib::Client authed = server.client();
    authed.set_bearer_token_auth("sesame");
    auto models = authed.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 200);
    EXPECT_EQ(json::parse(models->body)["object"], "list");
    auto missing = authed.Get("/webui/missing.js");
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 404);
    EXPECT_EQ(json::parse(missing->body)["error"]["type"], "not_found_error");
    // The metrics count the page under its own route label.
    const std::string metrics = authed.Get("/metrics")->body;
    EXPECT_NE(metrics.find("route=\"/\""), std::string::npos) << metrics.substr(0, 2000);
}

}  // namespace
}  // namespace kvstash::test
