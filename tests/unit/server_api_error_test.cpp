// The ErrorCode -> HTTP status table (server/api_error.h): what the client can fix is 400, what only
// the server's operator can fix is 500. Every code is listed, so a new ErrorCode fails here until it is
// placed on one side.
#include <gtest/gtest.h>

#include <iterator>

#include "server/api_error.h"

namespace kvstash::server {
namespace {

TEST(ServerApiError, EveryErrorCodeHasItsStatus) {
    struct Row {
        ErrorCode code;
        int status;
    };
    const Row table[] = {
        {ErrorCode::invalid_argument, 400},  // a bad value in the request
        {ErrorCode::out_of_range, 400},      // more tokens than the context holds
        {ErrorCode::unsupported, 400},       // something kvstash does not do
        {ErrorCode::io, 500},                // the server's disk
        {ErrorCode::bad_format, 500},        // the server's own files (client files are checked on arrival)
        {ErrorCode::internal, 500},          // a bug
        {ErrorCode::output, 500},            // the server could not write (its disk full, no permission)
    };
    static_assert(static_cast<size_t>(ErrorCode::output) + 1 == std::size(table), "a new ErrorCode needs a row");
    for (const Row& row : table) {
        EXPECT_EQ(http_status(row.code), row.status) << static_cast<int>(row.code);
        const ApiError e = api_error(Error(row.code, "what went wrong"));
        EXPECT_EQ(e.status(), row.status);
        EXPECT_STREQ(e.what(), "what went wrong");
    }
}

// A library error on request data is a 400 naming the field only when the client can fix it.
TEST(ServerApiError, RequestErrorKeepsTheServersFaultsAt500) {
    const ApiError client = request_error(Error(ErrorCode::invalid_argument, "bad role"), "messages", "invalid_value");
    EXPECT_EQ(client.status(), 400);
    EXPECT_EQ(client.param(), "messages");
    EXPECT_EQ(client.code(), "invalid_value");
    EXPECT_STREQ(client.what(), "bad role");
    for (const ErrorCode code : {ErrorCode::io, ErrorCode::bad_format, ErrorCode::internal}) {
        const ApiError server = request_error(Error(code, "a bug"), "messages", "invalid_value");
        EXPECT_EQ(server.status(), 500) << static_cast<int>(code);
        EXPECT_EQ(server.param(), "");
        EXPECT_EQ(server.code(), "");
        EXPECT_STREQ(server.what(), "a bug");
    }
}

TEST(ServerApiError, ErrorJsonHasTheOpenAiShape) {
    const auto body = error_json(400, "bad", "max_tokens", "invalid_value");
    EXPECT_EQ(body["error"]["message"], "bad");
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
    EXPECT_EQ(body["error"]["param"], "max_tokens");
    EXPECT_EQ(body["error"]["code"], "invalid_value");
    const auto server = error_json(500, "oops");
    EXPECT_EQ(server["error"]["type"], "server_error");
    EXPECT_TRUE(server["error"]["param"].is_null());
    EXPECT_TRUE(server["error"]["code"].is_null());
    EXPECT_EQ(error_json(404, "x")["error"]["type"], "not_found_error");
    EXPECT_EQ(error_json(503, "x")["error"]["type"], "server_overloaded");
}

}  // namespace
}  // namespace kvstash::server
