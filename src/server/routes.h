// Route registration and the helpers the route files share.
#pragma once

#include <functional>
#include <string>

#include <httplib.h>

#include "server/api_error.h"
#include "server/job.h"
#include "server/route_table.h"
#include "server/server_context.h"

namespace kvstash::server {

void register_openai_routes(RouteTable& http, ServerContext& ctx);
void register_state_routes(RouteTable& http, ServerContext& ctx);
void register_text_routes(RouteTable& http, ServerContext& ctx);       // /tokenize, /detokenize
void register_embedding_routes(RouteTable& http, ServerContext& ctx);  // /v1/embeddings
// llama-server's /completion, /props, /slots, /apply-template
void register_llama_routes(RouteTable& http, ServerContext& ctx);
void register_responses_routes(RouteTable& http, ServerContext& ctx);  // /v1/responses
void register_webui_routes(httplib::Server& http);                     // /, /webui/<file>
void register_ollama_routes(RouteTable& http, ServerContext& ctx);     // /api/chat, /api/generate, ... (Ollama)

// Every route of one model (the OpenAI, state, text, embedding, llama-server, Responses and Ollama routes).
void register_model_routes(RouteTable& routes, ServerContext& ctx);
class ModelRegistry;
// A server with several models: the listing routes, and a dispatcher per model route (server/model_routes.cpp).
void register_registry_routes(httplib::Server& http, ServerContext& server, ModelRegistry& registry);

// The /v1/embeddings computation (an OpenAI-shaped body in, the OpenAI-shaped answer out), for other routes
// that embed (Ollama's /api/embed); each function has its own evaluator, made at its first call.
using EmbeddingFunction = std::function<nlohmann::json(const nlohmann::json& openai_body)>;
EmbeddingFunction make_embedding_function(ServerContext& ctx);
// Whether `path` is one of the web page's files (served without the API key: they hold no data).
bool is_webui_path(const std::string& path);

// Runs a prefill job (POST /v1/states) to its end through the scheduler; returns the state, and its usage.
std::shared_ptr<State> run_prefill(ServerContext& ctx, std::unique_ptr<GenerationJob> job, Usage& usage);

// Writes the OpenAI-style error object (with Retry-After for 503).
void send_error(httplib::Response& res, const ApiError& error);
void send_json(httplib::Response& res, const nlohmann::json& body, int status = 200);
// Runs `body`, turning ApiError, kvstash::Error and JSON errors into error responses.
void guarded(httplib::Response& res, const std::function<void()>& body);
// 413 unless the JSON body fits --max-body.
void require_body_size(const httplib::Request& req, const ServerContext& ctx);

}  // namespace kvstash::server
