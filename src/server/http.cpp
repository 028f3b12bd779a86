#include "server/http.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <httplib.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "kvstash/chat.h"
#include "kvstash/error.h"
#include "server/api_key.h"
#include "server/connection_pool.h"
#include "server/guarded_server.h"
#include "server/model_registry.h"
#include "server/preset_warmup.h"
#include "server/request_log.h"
#include "server/routes.h"
#include "server/shared_models.h"
#include "server/state_store.h"
#include "server/state_store_redis.h"

namespace kvstash::server {
namespace {

bool is_upload(const httplib::Request& req) {
    return req.method == "PUT" && req.path.size() > 5 && req.path.ends_with("/file");
}

// The metrics label of a path: the route template, never the caller's text (bounded label set).
std::string route_label(const std::string& path) {
    for (const char* known : {"/v1/chat/completions",
                              "/v1/completions",
                              "/v1/models",
                              "/v1/states",
                              "/health",
                              "/metrics",
                              "/tokenize",
                              "/detokenize",
                              "/v1/embeddings",
                              "/v1/responses",
                              "/completion",
                              "/props",
                              "/slots",
                              "/apply-template",
                              "/api/chat",
                              "/api/generate",
                              "/api/tags",
                              "/api/ps",
                              "/api/show",
                              "/api/embed",
                              "/api/embeddings",
                              "/api/version"}) {
        if (path == known) return known;
    }
    if (is_webui_path(path)) return path == "/" ? "/" : "/webui/{file}";
    if (path.starts_with("/v1/states/"))
        return path.ends_with("/file") ? "/v1/states/{name}/file" : "/v1/states/{name}";
    return "other";
}

// CORS (--cors-origin): a request from an allowed origin gets Access-Control-Allow-Origin on its answer
// (errors included), and a preflight OPTIONS is answered here, before the API key is asked for (browsers
// send no credentials with a preflight). Returns true when the request was a preflight (answered).
bool apply_cors(const ServerOptions& o, const httplib::Request& req, httplib::Response& res) {
    if (o.cors_origins.empty() || !req.has_header("Origin")) return false;
    const std::string origin = req.get_header_value("Origin");
    const bool any = std::find(o.cors_origins.begin(), o.cors_origins.end(), "*") != o.cors_origins.end();
    if (!any && std::find(o.cors_origins.begin(), o.cors_origins.end(), origin) == o.cors_origins.end()) return false;
    res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
    if (!any) res.set_header("Vary", "Origin");
    if (req.method != "OPTIONS" || !req.has_header("Access-Control-Request-Method")) return false;
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS");
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
    res.set_header("Access-Control-Max-Age", "600");
    return true;
}

// What is decided from the request head alone, before any of the body is read: the API key (401), a body
// without a length (411) and a body over its limit (413). Writes the refusal into `res` and returns true,
// or returns false.
bool refuse_before_body(const ServerOptions& o, const httplib::Request& req, httplib::Response& res) {
    if (!o.api_key.empty() && req.path != "/health" && !is_webui_path(req.path) &&
        !api_key_presented(req.get_header_value("Authorization"), req.get_header_value("X-Api-Key"), o.api_key)) {
        send_error(
            res, ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>' or 'X-Api-Key: <key>'", "",
                          "invalid_api_key"));
        return true;
    }
    // cpp-httplib 0.11 reads a chunked body whole into memory, whatever set_payload_max_length says,
    // before any handler runs; only here, before the body is read, can it still be refused. A body
    // must therefore announce its size: 411, as RFC 9110 has it for a length the server requires.
    if (req.has_header("Transfer-Encoding")) {
        send_error(res, ApiError(411,
                                 "request bodies must have a Content-Length (chunked or other transfer "
                                 "encodings are not accepted, so that --max-body / --max-state-bytes are "
                                 "checked before reading)",
                                 "", "length_required"));
        return true;
    }
    if (req.has_header("Content-Length")) {
        const uint64_t length = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
        const uint64_t limit = is_upload(req) ? o.max_state_bytes : o.max_body;
        if (length > limit) {
            send_error(res,
                       ApiError(413,
                                "the request body has " + std::to_string(length) + " bytes; the limit is " +
                                    std::to_string(limit) + (is_upload(req) ? " (--max-state-bytes)" : " (--max-body)"),
                                "", "request_too_large"));
            return true;
        }
    }
    return false;
}

// cpp-httplib's task queue over our ConnectionPool (one thread per open connection, bounded).
class ConnectionQueue : public httplib::TaskQueue {
public:
    explicit ConnectionQueue(size_t max_connections) : pool_(max_connections, std::chrono::seconds(30)) {}
    void enqueue(std::function<void()> fn) override { pool_.enqueue(std::move(fn)); }
    void shutdown() override { pool_.shutdown(); }

private:
    ConnectionPool pool_;
};

// Every open connection holds a descriptor: make room for --max-connections of them (and the files and
// sockets of the rest of the server) when the soft limit is lower, as far as the hard limit allows.
void raise_descriptor_limit(int max_connections) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
    const rlim_t wanted = static_cast<rlim_t>(max_connections) + 256;
    if (limit.rlim_cur >= wanted) return;
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
}

// Whether two existing directories are on one filesystem (st_dev); false when either is empty or missing.
bool same_filesystem(const std::string& a, const std::string& b) {
    struct stat sa {
    }, sb{};
    if (a.empty() || b.empty() || ::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
    return sa.st_dev == sb.st_dev;
}

// A model's name as one directory name ("owner/name:Q8_0" -> "owner_name_Q8_0").
std::string safe_dir_name(std::string name) {
    for (char& c : name) {
        if (c == '/' || c == ':' || c == '\\') c = '_';
    }
    return name;
}

std::unique_ptr<ServerContext> make_server_context(std::shared_ptr<const Model> model, const ServerOptions& options,
                                                   Metrics* shared_metrics) {
    auto owned = std::make_unique<ServerContext>();
    ServerContext& ctx = *owned;
    ctx.model = model;
    ctx.options = options;
    ctx.model_id = options.model_id.empty() ? std::filesystem::path(model->path()).stem().string() : options.model_id;
    try {
        ctx.chat_template = options.chat_template.empty() ? ChatTemplate::for_model(*model)
                                                          : ChatTemplate::named(options.chat_template);
    } catch (const Error& e) {
        if (!options.chat_template.empty()) throw;
        ctx.chat_template_error = std::string("this model has no chat template kvstash knows (") + e.what() +
                                  "); start the server with --chat-template or use /v1/completions";
    }
    // A preset's named states are computed under its adapters and loaded back under them.
    const std::shared_ptr<const AdapterSet> adapters =
        options.default_adapter.empty() ? nullptr : options.adapters.at(options.default_adapter);
    StateStore* state_files = nullptr;
    if (options.state_store.empty()) {
        auto store = std::make_unique<StateStore>(*model, options.state_dir, adapters);
        state_files = store.get();
        ctx.states = std::move(store);
    } else {
        // Uploads and states are whole state files: give them more time than a cache block.
        ctx.states = std::make_unique<RedisStateStore>(
            *model, options.state_store,
            RedisTimeouts{options.redis_connect_timeout_ms, std::max(options.redis_io_timeout_ms, 10000)}, adapters);
    }
    SchedulerOptions sched;
    sched.threads = options.threads;
    sched.parallel = options.parallel;
    sched.queue = options.queue;
    sched.n_ctx = options.n_ctx;
    sched.kv_type = options.kv_type;
    sched.step_tokens = options.step_tokens;
    sched.cache.ram_budget_bytes = options.cache_ram_mib << 20;
    sched.cache.disk_dir = options.cache_dir;
    sched.cache.disk_budget_bytes = options.cache_disk_mib << 20;
    sched.cache.redis_url = options.cache_redis;
    sched.cache.redis_connect_timeout_ms = options.redis_connect_timeout_ms;
    sched.cache.redis_io_timeout_ms = options.redis_io_timeout_ms;
    sched.adapters = options.adapters;
    sched.draft_model = options.draft_model;
    ctx.scheduler = std::make_unique<Scheduler>(model, sched, shared_metrics ? *shared_metrics : ctx.metrics);
    // Issue 34: on a filesystem the cache's block files share with the state files, a full disk frees cache
    // blocks (which can be computed again) before a state save fails.
    if (state_files && !options.state_dir.empty() && same_filesystem(options.state_dir, options.cache_dir)) {
        Scheduler* scheduler = ctx.scheduler.get();
        state_files->set_space_reclaimer(
            [scheduler](uint64_t bytes) { return scheduler->evict_cache_disk_bytes(bytes); });
    }
    return owned;
}

}  // namespace

void register_model_routes(RouteTable& routes, ServerContext& ctx) {
    register_openai_routes(routes, ctx);
    register_state_routes(routes, ctx);
    register_text_routes(routes, ctx);
    register_embedding_routes(routes, ctx);
    register_llama_routes(routes, ctx);
    register_responses_routes(routes, ctx);
    register_ollama_routes(routes, ctx);
}

namespace {

void add_routes(httplib::Server& http, const RouteTable& routes) {
    for (const RouteTable::Route& route : routes.routes()) {
        if (const auto* reading = std::get_if<RouteTable::ReadingHandler>(&route.handler)) {
            http.Put(route.pattern, *reading);
        } else {
            const auto& handler = std::get<RouteTable::Handler>(route.handler);
            if (route.method == "GET") http.Get(route.pattern, handler);
            if (route.method == "POST") http.Post(route.pattern, handler);
            if (route.method == "DELETE") http.Delete(route.pattern, handler);
        }
    }
}

}  // namespace

HttpServer::HttpServer(std::shared_ptr<const Model> model, ServerOptions options)
    : ctx_(make_server_context(model, options, nullptr)) {
    configure(options);
    RouteTable routes;
    register_model_routes(routes, *ctx_);
    add_routes(*http_, routes);
    register_webui_routes(*http_);
}

HttpServer::HttpServer(std::vector<ModelSource> sources, RegistryOptions registry_options, ModelLoader load,
                       ServerOptions options)
    : ctx_(std::make_unique<ServerContext>()) {
    ctx_->options = options;
    Metrics* metrics = &ctx_->metrics;
    auto shared = std::make_shared<SharedModels>();
    registry_ = std::make_unique<ModelRegistry>(
        std::move(sources), registry_options,
        [load = std::move(load), options, metrics, shared](const ModelSource& source) {
            ServerOptions own = options;
            own.model_id = source.name;
            if (source.preset && !source.preset->chat_template.empty())
                own.chat_template = source.preset->chat_template;
            // Named states are per model: a directory each under --state-dir (the Redis store's keys carry
            // the model fingerprint already).
            if (!own.state_dir.empty())
                own.state_dir = (std::filesystem::path(own.state_dir) / safe_dir_name(source.name)).string();
            // A preset over a model another entry has loaded runs on the same weights (server/shared_models.h).
            std::shared_ptr<const Model> model =
                shared->get(model_weights_key(source.path), [&] { return load(source); });
            if (source.preset && !source.preset->adapters.empty()) {
                // Its requests run under its adapters (none named: the default), in a prefix cache and named
                // states of their own: the scheduler keys a set's cache by the model + adapters fingerprint.
                own.adapters = {{source.name, AdapterSet::load(*model, source.preset->adapters)}};
                own.default_adapter = source.name;
                std::fprintf(stderr, "kvstash serve: preset '%s': %s\n", source.name.c_str(),
                             own.adapters.at(source.name)->describe().c_str());
            }
            auto loaded = std::make_unique<LoadedModel>();
            loaded->ctx = make_server_context(model, own, metrics);
            register_model_routes(loaded->routes, *loaded->ctx);
            if (source.preset) {
                const std::string cold = warm_preset(*loaded, *source.preset);
                if (!cold.empty()) {
                    std::fprintf(stderr, "kvstash serve: preset '%s': its system prompt was not prefilled (%s)\n",
                                 source.name.c_str(), cold.c_str());
                }
            }
            return loaded;
        });
    configure(options);
    register_registry_routes(*http_, *ctx_, *registry_);
    register_webui_routes(*http_);
}

void HttpServer::configure(const ServerOptions& options) {
    ServerContext& ctx = *ctx_;
    ConnectionLimits limits;
    limits.head.first_byte = std::chrono::seconds(options.idle_timeout_s);
    limits.head.whole_head = std::chrono::seconds(options.header_timeout_s);
    limits.head.between_bytes = std::chrono::seconds(options.read_timeout_s);
    limits.head.max_head_bytes = static_cast<size_t>(options.max_header_bytes);
    limits.head.max_line_bytes = std::min<size_t>(limits.head.max_head_bytes, 8 * 1024);
    limits.max_connections = options.max_connections;
    limits.max_per_address = options.max_connections_per_ip;
    http_ = std::make_unique<GuardedServer>(limits);
    httplib::Server& http = *http_;
    // Slow or idle clients must not lock others out (issue 19). cpp-httplib 0.11 serves a connection on
    // one thread from accept to close, so: a thread per open connection up to --max-connections (not a
    // fixed pool that N idle clients fill), an open connection closed after --idle-timeout without a
    // request, and a request dropped when it pauses --read-timeout between bytes.
    raise_descriptor_limit(options.max_connections);
    const size_t max_connections = static_cast<size_t>(options.max_connections);
    http.new_task_queue = [max_connections] { return new ConnectionQueue(max_connections); };
    http.set_keep_alive_timeout(options.idle_timeout_s);
    http.set_read_timeout(options.read_timeout_s);
    // One request per connection. A request refused before its body is read (401, 411, 413 below) leaves
    // the body in the socket; cpp-httplib 0.11 ignores a handler's "Connection: close", so on a kept-alive
    // connection it would parse that body as the next request, reading a "request line" of any length
    // into memory (a 1 GiB body after a 413 peaked at 1 GB). Closing after every response drops it unread.
    http.set_keep_alive_max_count(1);
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
        if (apply_cors(ctx.options, req, res)) return httplib::Server::HandlerResponse::Handled;
        return refuse_before_body(ctx.options, req, res) ? httplib::Server::HandlerResponse::Handled
                                                         : httplib::Server::HandlerResponse::Unhandled;
    });
    // A client that sends "Expect: 100-continue" waits for a go-ahead before its body: refuse it then, so
    // the body is never sent (cpp-httplib 0.11 would otherwise answer 100 before the pre-routing handler
    // runs, and the final answer could be lost to the reset of a connection closed with the body unread).
    http.set_expect_100_continue_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
        return refuse_before_body(ctx.options, req, res) ? res.status : 100;
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
        } catch (const ApiError& e) {  // a route outside guarded(): keep its status
            send_error(res, e);
            return;
        } catch (const std::exception& e) {
            message = std::string("internal error: ") + e.what();
        } catch (...) {}
        send_error(res, ApiError(500, message));
    });
    http.set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
        ctx.metrics.count_request(route_label(req.path), res.status);
        request_log_write(ctx.options, req, res, route_label(req.path));
    });
}

HttpServer::~HttpServer() {
    if (http_) http_->stop();
    http_.reset();
    registry_.reset();
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
