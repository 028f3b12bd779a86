#include "server/http.h"

#include <sys/socket.h>

#include <httplib.h>
#include <filesystem>

#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "server/request_log.h"
#include "server/routes.h"

namespace kvstash::server {
namespace {

bool is_upload(const httplib::Request& req) {
    return req.method == "PUT" && req.path.size() > 5 && req.path.ends_with("/file");
}

// The metrics label of a path: the route template, never the caller's text (bounded label set).
std::string route_label(const std::string& path) {
    for (const char* known : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/states", "/health",
                              "/metrics", "/tokenize", "/detokenize", "/v1/embeddings"}) {
        if (path == known) return known;
    }
    if (path.starts_with("/v1/states/"))
        return path.ends_with("/file") ? "/v1/states/{name}/file" : "/v1/states/{name}";
    return "other";
}

}  // namespace

HttpServer::HttpServer(std::shared_ptr<const Model> model, ServerOptions options)
    : ctx_(std::make_unique<ServerContext>()) {
    ServerContext& ctx = *ctx_;
    ctx.model = model;
    ctx.options = options;
    ctx.model_id = std::filesystem::path(model->path()).stem().string();
    try {
        ctx.chat_template = options.chat_template.empty() ? ChatTemplate::for_model(*model)
                                                          : ChatTemplate::named(options.chat_template);
    } catch (const Error& e) {
        if (!options.chat_template.empty()) throw;
        ctx.chat_template_error = std::string("this model has no chat template kvstash knows (") + e.what() +
                                  "); start the server with --chat-template or use /v1/completions";
    }
    ctx.states = std::make_unique<StateStore>(*model, options.state_dir);
    SchedulerOptions sched;
    sched.threads = options.threads;
    sched.parallel = options.parallel;
    sched.queue = options.queue;
    sched.n_ctx = options.n_ctx;
    sched.step_tokens = options.step_tokens;
    sched.cache.ram_budget_bytes = options.cache_ram_mib << 20;
    sched.cache.disk_dir = options.cache_dir;
    ctx.scheduler = std::make_unique<Scheduler>(model, sched, ctx.metrics);

    http_ = std::make_unique<httplib::Server>();
    httplib::Server& http = *http_;
    // One handler thread per streaming client: enough for every slot and every queued request, plus a
    // few for /health, /metrics and state routes.
    const size_t handler_threads = static_cast<size_t>(options.parallel + options.queue + 8);
    http.new_task_queue = [handler_threads] { return new httplib::ThreadPool(handler_threads); };
    // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients overflows it while the accept thread
    // waits for a CPU. Keep the listening socket to raise the backlog after bind (see bind()).
    http.set_socket_options([this](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        listen_socket_ = sock;
    });
    http.set_payload_max_length(static_cast<size_t>(std::max(options.max_body, options.max_state_bytes)));
    http.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
        request_log_begin();
        const ServerOptions& o = ctx.options;
        if (!o.api_key.empty() && req.path != "/health" &&
            req.get_header_value("Authorization") != "Bearer " + o.api_key) {
            send_error(res, ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'", "",
                                     "invalid_api_key"));
            return httplib::Server::HandlerResponse::Handled;
        }
        if (req.has_header("Content-Length")) {
            const uint64_t length = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
            const uint64_t limit = is_upload(req) ? o.max_state_bytes : o.max_body;
            if (length > limit) {
                send_error(res, ApiError(413,
                                         "the request body has " + std::to_string(length) + " bytes; the limit is " +
                                             std::to_string(limit) +
                                             (is_upload(req) ? " (--max-state-bytes)" : " (--max-body)"),
                                         "", "request_too_large"));
                res.set_header("Connection", "close");
                return httplib::Server::HandlerResponse::Handled;
            }
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    // Errors httplib answers itself (unknown route, oversized or malformed request) get the same JSON shape.
    http.set_error_handler(
        httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            std::string message = res.status == 404 ? "no route for " + req.method + " " + req.path
                                  : res.status == 413
                                      ? "the request body is too large"
                                      : "the request could not be handled (HTTP " + std::to_string(res.status) + ")";
            send_error(res, ApiError(res.status, message));
            return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string message = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            message = std::string("internal error: ") + e.what();
        } catch (...) {}
        send_error(res, ApiError(500, message));
    });
    http.set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
        ctx.metrics.count_request(route_label(req.path), res.status);
        request_log_write(ctx.options, req, res, route_label(req.path));
    });
    register_openai_routes(http, ctx);
    register_state_routes(http, ctx);
    register_text_routes(http, ctx);
    register_embedding_routes(http, ctx);
}

HttpServer::~HttpServer() {
    if (http_) http_->stop();
    http_.reset();
    ctx_.reset();
}

int HttpServer::bind() {
    const ServerOptions& o = ctx_->options;
    int port = o.port;
    if (port == 0) {
        port = http_->bind_to_any_port(o.host);
        if (port < 0) port = 0;
    } else if (!http_->bind_to_port(o.host, port)) {
        port = 0;
    }
    if (port > 0 && listen_socket_ >= 0) ::listen(listen_socket_, SOMAXCONN);  // Linux: re-listen sets the backlog
    if (port <= 0) {
        throw Error(ErrorCode::io, "cannot listen on " + o.host + ":" + std::to_string(o.port) +
                                       " (in use, or not an address of this machine); pick another --port or --host");
    }
    return port;
}

void HttpServer::run() { http_->listen_after_bind(); }

void HttpServer::stop() { http_->stop(); }

}  // namespace kvstash::server
