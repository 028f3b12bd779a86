// Reading Ollama's request bodies (POST /api/chat, /api/generate) into the OpenAI routes' CompletionRequest,
// so that both APIs run through one job builder and one scheduler (server/request_job.h). Ollama's names
// and defaults are kept: `options` (temperature 0.8, top_k 40, top_p 0.9, min_p 0, repeat_penalty 1.1,
// repeat_last_n 64, num_predict -1 = until a stop or the context's end, seed, stop, num_ctx, presence_penalty,
// frequency_penalty), `format` ("json" or a JSON Schema), `tools`, `stream` (true by default), `keep_alive`.
// A field kvstash has no meaning for (images, template, context, suffix, think: true, raw templates of other
// engines, GPU and thread options) is refused with 400 naming it, never ignored. Pure: no model needed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace kvstash::server {

enum class OllamaEndpoint { chat, generate };

struct OllamaRequest {
    std::string model;                   // as the client named it ("name" or "name:tag")
    bool stream = true;                  // Ollama streams unless told not to
    CompletionRequest completion;        // messages (chat, or generate through the chat template) or a raw prompt
    std::optional<int64_t> num_predict;  // none (or -1, -2): until a stop or the end of the context
    std::optional<int64_t> num_ctx;      // at most the server's context: this request's prompt + answer fit in it
    bool load_only = false;  // generate with no prompt, chat with no messages: Ollama's "load the model" request
};

// Throws ApiError 400 naming the field for a bad or meaningless one. `raw_body` (the body's text), when given,
// keeps the tools' keys in the client's order (as parse_completion_request).
OllamaRequest parse_ollama_request(const nlohmann::json& body, OllamaEndpoint endpoint, const RequestLimits& limits,
                                   const std::string* raw_body = nullptr);

// keep_alive: a number of seconds, or a duration string ("5m", "1h30m", "-1", "0"); 400 otherwise. With one model
// it has no other effect (held for the server's lifetime); with several, server/model_routes.cpp applies it.
void check_keep_alive(const nlohmann::json& body);

}  // namespace kvstash::server
