// POST /v1/embeddings (OpenAI's shape, as llama-server answers it with --embeddings --pooling mean):
//   {"input": "text" | ["text", ...] | [id, ...] | [[id, ...], ...], "encoding_format": "float" | "base64",
//    "embd_normalize": 2}
//   -> {"object": "list", "model": ..., "data": [{"object": "embedding", "index": i, "embedding": [...]}],
//       "usage": {"prompt_tokens": n, "total_tokens": n}}
// Each input is tokenized as llama-server does (special tokens added and parsed), evaluated alone from an
// empty sequence, and its final-norm hidden states (Evaluator::eval_hidden) are averaged over all its
// tokens (mean pooling), then normalised like llama-server's embd_normalize (default 2: unit Euclidean
// length; -1 none, 0 max-abs to int16 range, 1 taxicab, p > 2 p-norm). The prefix cache and the
// scheduler are not involved: a separate evaluator (one request at a time) runs next to them.
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvstash/evaluator.h"
#include "kvstash/state.h"
#include "kvstash/tokenizer.h"
#include "server/openai_request.h"
#include "server/request_fields.h"
#include "server/request_job.h"
#include "server/request_log.h"
#include "server/routes.h"

using nlohmann::json;

namespace kvstash::server {
namespace {

// The evaluator is made at the first request (its threads cost nothing until embeddings are used).
struct Embedder {
    std::mutex mutex;
    std::unique_ptr<Evaluator> evaluator;
};

bool is_token_array(const json& value) {
    if (!value.is_array() || value.empty()) return false;
    for (const json& v : value)
        if (!v.is_number_integer()) return false;
    return true;
}

std::vector<int32_t> token_ids(const json& value, const Tokenizer& tokenizer) {
    std::vector<int32_t> ids;
    for (const json& v : value) ids.push_back(static_cast<int32_t>(get_int(v, "input", 0, tokenizer.n_vocab() - 1)));
    return ids;
}

// One token sequence per input.
std::vector<std::vector<int32_t>> parse_inputs(const json& body, const Tokenizer& tokenizer, int max_inputs) {
    const json* input = field(body, "input");
    const char* name = "input";
    if (!input) {
        input = field(body, "content");  // llama-server's own name for it
        name = "content";
    }
    if (!input)
        throw bad_request("'input' is required: a string, an array of strings or of token ids", "input",
                          "missing_field");
    const auto encode = [&](const json& text) {
        return tokenizer.encode(get_string(text, name), AddSpecial::yes, ParseSpecial::yes);
    };
    std::vector<std::vector<int32_t>> inputs;
    if (input->is_string()) {
        inputs.push_back(encode(*input));
    } else if (is_token_array(*input)) {
        inputs.push_back(token_ids(*input, tokenizer));
    } else if (input->is_array() && !input->empty()) {
        // Each input is evaluated alone: 10k inputs took 203 s before this bound (checked before tokenizing).
        if (input->size() > static_cast<size_t>(max_inputs)) {
            throw bad_request("'" + std::string(name) + "' has " + std::to_string(input->size()) +
                                  " inputs; the limit is " + std::to_string(max_inputs) +
                                  " per request (--max-embedding-inputs): send them in several requests",
                              name, "too_many_inputs");
        }
        for (const json& item : *input) {
            if (item.is_string()) {
                inputs.push_back(encode(item));
            } else if (is_token_array(item)) {
                inputs.push_back(token_ids(item, tokenizer));
            } else {
                throw wrong_type(name, "a string, an array of strings, or an array of token-id arrays");
            }
        }
    } else {
        throw wrong_type(name, "a string or a non-empty array of strings or token ids");
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
        if (inputs[i].empty()) {
            throw bad_request("input " + std::to_string(i) + " has no tokens; embeddings need at least one", name,
                              "invalid_value");
        }
    }
    return inputs;
}

// llama.cpp's common_embd_normalize.
void normalize(std::vector<float>& v, int norm) {
    double sum = 0.0;
    switch (norm) {
        case -1: sum = 1.0; break;
        case 0:
            for (float x : v) sum = std::max(sum, std::fabs(static_cast<double>(x)));
            sum /= 32760.0;
            break;
        case 2:
            for (float x : v) sum += static_cast<double>(x) * x;
            sum = std::sqrt(sum);
            break;
        default:
            for (float x : v) sum += std::pow(std::fabs(static_cast<double>(x)), norm);
            sum = std::pow(sum, 1.0 / norm);
            break;
    }
    const float scale = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
    for (float& x : v) x *= scale;
}

std::string base64(const std::vector<float>& v) {
    static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());  // little-endian float32, as OpenAI
    const size_t n = v.size() * sizeof(float);
    std::string out;
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t chunk = (uint32_t{bytes[i]} << 16) | (i + 1 < n ? uint32_t{bytes[i + 1]} << 8 : 0) |
                               (i + 2 < n ? uint32_t{bytes[i + 2]} : 0);
        out += alphabet[(chunk >> 18) & 63];
        out += alphabet[(chunk >> 12) & 63];
        out += i + 1 < n ? alphabet[(chunk >> 6) & 63] : '=';
        out += i + 2 < n ? alphabet[chunk & 63] : '=';
    }
    return out;
}

json embeddings(const json& body, ServerContext& ctx, Embedder& embedder) {
    const Tokenizer& tokenizer = ctx.model->tokenizer();
    const std::vector<std::vector<int32_t>> inputs = parse_inputs(body, tokenizer, ctx.options.max_embedding_inputs);
    std::string encoding = "float";
    if (const json* e = field(body, "encoding_format")) encoding = get_string(*e, "encoding_format");
    if (encoding != "float" && encoding != "base64") {
        throw bad_request("'encoding_format' must be \"float\" or \"base64\"", "encoding_format", "invalid_value");
    }
    int norm = 2;
    if (const json* n = field(body, "embd_normalize")) norm = static_cast<int>(get_int(*n, "embd_normalize", -1, 64));
    const int64_t n_ctx = ctx.scheduler->n_ctx();
    int64_t total = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        const auto n = static_cast<int64_t>(inputs[i].size());
        if (n > n_ctx) {
            throw bad_request("input " + std::to_string(i) + " has " + std::to_string(n) +
                                  " tokens; the server's context holds " + std::to_string(n_ctx),
                              "input", "context_length_exceeded");
        }
        total += n;
    }
    request_log_tokens(total, 0, 0);

    const auto n_embd = static_cast<size_t>(ctx.model->info().n_embd);
    json data = json::array();
    std::lock_guard lock(embedder.mutex);
    if (!embedder.evaluator) embedder.evaluator = std::make_unique<Evaluator>(ctx.model, ctx.options.threads);
    std::vector<float> hidden;
    for (size_t i = 0; i < inputs.size(); ++i) {
        State state(*ctx.model,
                    StateOptions{.n_ctx = static_cast<int64_t>(inputs[i].size()), .adapters = default_adapters(ctx)});
        embedder.evaluator->eval_hidden(state, inputs[i], hidden);
        // Mean over the tokens, summed in double in token order (fixed order: the same bits every time).
        std::vector<double> sum(n_embd, 0.0);
        for (size_t t = 0; t < inputs[i].size(); ++t) {
            const float* row = hidden.data() + t * n_embd;
            for (size_t k = 0; k < n_embd; ++k) sum[k] += row[k];
        }
        std::vector<float> pooled(n_embd);
        for (size_t k = 0; k < n_embd; ++k)
            pooled[k] = static_cast<float>(sum[k] / static_cast<double>(inputs[i].size()));
        normalize(pooled, norm);
        json item = {{"object", "embedding"}, {"index", i}};
        if (encoding == "base64") {
            item["embedding"] = base64(pooled);
        } else {
            item["embedding"] = pooled;
        }
        data.push_back(std::move(item));
    }
    return {{"object", "list"},
            {"model", ctx.model_id},
            {"data", std::move(data)},
            {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}};
}

}  // namespace

EmbeddingFunction make_embedding_function(ServerContext& ctx) {
    auto embedder = std::make_shared<Embedder>();
    return [&ctx, embedder](const json& body) { return embeddings(body, ctx, *embedder); };
}

void register_embedding_routes(RouteTable& http, ServerContext& ctx) {
    EmbeddingFunction embed = make_embedding_function(ctx);
    http.Post("/v1/embeddings", [&ctx, embed](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] {
            require_body_size(req, ctx);
            send_json(res, embed(parse_json_body(req.body)));
        });
    });
}

}  // namespace kvstash::server
