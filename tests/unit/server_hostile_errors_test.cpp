// Issue 34, items 7, 8 and 10 below HTTP: the API key check, 5xx messages without file paths, and a
// full disk answered 507.
#include <gtest/gtest.h>

#include <string>

#include "kvstash/error.h"
#include "server/api_error.h"
#include "server/api_key.h"

namespace kvstash::server {
namespace {

TEST(ServerHostileErrors, ApiKeyForms) {
    EXPECT_TRUE(api_key_presented("Bearer k3y", "", "k3y"));
    EXPECT_TRUE(api_key_presented("bearer k3y", "", "k3y"));
    EXPECT_TRUE(api_key_presented("BeArEr   k3y", "", "k3y"));
    EXPECT_TRUE(api_key_presented("", "k3y", "k3y"));
    EXPECT_TRUE(api_key_presented("Bearer wrong", "k3y", "k3y"));
    EXPECT_FALSE(api_key_presented("Bearer k3", "", "k3y"));
    EXPECT_FALSE(api_key_presented("Bearer k3yy", "", "k3y"));
    EXPECT_FALSE(api_key_presented("Bearerk3y", "", "k3y"));
    EXPECT_FALSE(api_key_presented("Basic k3y", "", "k3y"));
    EXPECT_FALSE(api_key_presented("", "", "k3y"));
    EXPECT_FALSE(api_key_presented("Bearer ", "", ""));  // an empty key is never matched
    EXPECT_TRUE(equal_in_constant_time("abc", "abc"));
    EXPECT_FALSE(equal_in_constant_time("abcabc", "abc"));  // (repeating the key does not match it)
    EXPECT_FALSE(equal_in_constant_time("", "abc"));
}

TEST(ServerHostileErrors, ServerErrorsShowNoPaths) {
    EXPECT_EQ(without_paths("cannot save state file '/srv/kvstash/states/a.kvs': writing it: No space left"),
              "cannot save state file '<path>': writing it: No space left");
    EXPECT_EQ(without_paths("open models/x.gguf failed."), "open <path> failed.");
    EXPECT_EQ(without_paths("no path here"), "no path here");
    const auto body = error_json(500, "state 'a' could not be loaded: /var/lib/kvstash/a.kvs: bad checksum");
    const std::string message = body["error"]["message"];
    EXPECT_EQ(message.find("/var/lib"), std::string::npos) << message;
    EXPECT_NE(message.find("bad checksum"), std::string::npos) << message;
    // Client errors keep their text (a 404 names the route the client asked for).
    EXPECT_EQ(error_json(404, "no route for GET /v1/x")["error"]["message"], "no route for GET /v1/x");
}

TEST(ServerHostileErrors, FullDiskIs507) {
    const ApiError full =
        api_error(Error(ErrorCode::output, "cannot save state file '/s/a.kvs': No space left on device"));
    EXPECT_EQ(full.status(), 507);
    EXPECT_EQ(full.code(), "insufficient_storage");
    EXPECT_EQ(api_error(Error(ErrorCode::output, "cannot save: Permission denied")).status(), 500);
}

}  // namespace
}  // namespace kvstash::server
