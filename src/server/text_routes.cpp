// POST /tokenize and POST /detokenize, with llama-server's request and response shapes:
//   /tokenize    {"content": "...", "add_special": false, "parse_special": true, "with_pieces": false}
//                -> {"tokens": [id, ...]}, or with_pieces: {"tokens": [{"id": id, "piece": "..."}, ...]} where a
//                piece that is not valid UTF-8 (part of a character) is given as its byte values instead.
//   /detokenize  {"tokens": [id, ...]} -> {"content": "..."}
// `kvstash tokenize` equals /tokenize with add_special true.
#include <string>
#include <vector>

#include "base/utf8.h"
#include "kvstash/tokenizer.h"
#include "server/openai_request.h"
#include "server/request_fields.h"
#include "server/request_log.h"
#include "server/routes.h"

using nlohmann::json;

namespace kvstash::server {
namespace {

bool optional_bool(const json& body, const char* name, bool otherwise) {
    const json* value = field(body, name);
    return value ? get_bool(*value, name) : otherwise;
}

json tokenize(const json& body, const Tokenizer& tokenizer) {
    const json* content = field(body, "content");
    if (!content) throw bad_request("'content' is required: the text to tokenize", "content", "missing_field");
    const std::string text = get_string(*content, "content");
    const bool add_special = optional_bool(body, "add_special", false);
    const bool parse_special = optional_bool(body, "parse_special", true);
    const bool with_pieces = optional_bool(body, "with_pieces", false);
    const std::vector<int32_t> ids = tokenizer.encode(text, add_special ? AddSpecial::yes : AddSpecial::no,
                                                      parse_special ? ParseSpecial::yes : ParseSpecial::no);
    request_log_tokens(static_cast<int64_t>(ids.size()), -1, -1);
    json tokens = json::array();
    for (int32_t id : ids) {
        if (!with_pieces) {
            tokens.push_back(id);
            continue;
        }
        const std::string piece = tokenizer.token_piece(id);
        if (utf8::is_valid(piece)) {
            tokens.push_back({{"id", id}, {"piece", piece}});
        } else {
            json bytes = json::array();
            for (char c : piece) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
            tokens.push_back({{"id", id}, {"piece", bytes}});
        }
    }
    return {{"tokens", tokens}};
}

json detokenize(const json& body, const Tokenizer& tokenizer) {
    const json* tokens = field(body, "tokens");
    if (!tokens) throw bad_request("'tokens' is required: an array of token ids", "tokens", "missing_field");
    if (!tokens->is_array()) throw wrong_type("tokens", "an array of token ids");
    std::vector<int32_t> ids;
    ids.reserve(tokens->size());
    for (const json& id : *tokens)
        ids.push_back(static_cast<int32_t>(get_int(id, "tokens", 0, tokenizer.n_vocab() - 1)));
    request_log_tokens(static_cast<int64_t>(ids.size()), -1, -1);
    return {{"content", tokenizer.decode(ids)}};
}

}  // namespace

void register_text_routes(RouteTable& http, ServerContext& ctx) {
    http.Post("/tokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] {
            require_body_size(req, ctx);
            send_json(res, tokenize(parse_json_body(req.body), ctx.model->tokenizer()));
        });
    });
    http.Post("/detokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] {
            require_body_size(req, ctx);
            send_json(res, detokenize(parse_json_body(req.body), ctx.model->tokenizer()));
        });
    });
}

}  // namespace kvstash::server
