// The routes of a server with several models (HttpServer's ModelRegistry form). Every route of one model
// (RouteTable, server/http.cpp's register_model_routes) gets a dispatcher here that finds the model the
// request names, loads it if need be, and runs that model's own handler of the route:
//   the JSON body's "model" (OpenAI, Ollama and llama-server routes alike), else the query's ?model=NAME
//   (GET routes, state files), else the first model. Unknown: 404; failed to load: 500 with the load error.
// The request holds its model (a lease) until its response is written, a streamed one included, so an unload
// for room or idleness never cuts it. Listing routes answer from the registry without loading anything:
// /v1/models and /api/tags every model (with "loaded" and its size), /api/ps the loaded ones. /health,
// /api/version and /metrics belong to the server, not a model.
#include <chrono>
#include <ctime>

#include "server/model_registry.h"
#include "server/ollama_response.h"
#include "server/openai_request.h"
#include "server/routes.h"

using nlohmann::json;

namespace kvstash::server {
namespace {

bool is_ollama_path(const std::string& path) { return path.starts_with("/api/"); }

void send_route_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
    if (!is_ollama_path(req.path)) return send_error(res, e);
    if (e.status() == 503) res.set_header("Retry-After", "1");
    send_json(res, {{"error", e.status() >= 500 ? without_paths(e.what()) : std::string(e.what())}}, e.status());
}

// The body's JSON, when it is an object (null otherwise: the route itself answers a bad body).
json body_object(const httplib::Request& req) {
    if (req.body.empty() || req.body.front() != '{') return nullptr;
    try {
        json body = parse_json_body(req.body);
        return body.is_object() ? body : json(nullptr);
    } catch (const std::exception&) {
        return nullptr;
    }
}

std::string requested_model(const httplib::Request& req, const json& body) {
    if (body.is_object()) {
        const auto it = body.find("model");
        if (it != body.end() && it->is_string()) return it->get<std::string>();
    }
    return req.has_param("model") ? req.get_param_value("model") : std::string();
}

// Ollama's keep_alive (a number of seconds, or a Go duration "5m", "1h30m", "2.5s"; negative: forever); none
// when absent or unreadable (the route answers 400 for unreadable ones).
std::optional<double> keep_alive_seconds(const json& body) {
    if (!body.is_object() || !body.contains("keep_alive")) return std::nullopt;
    const json& v = body["keep_alive"];
    if (v.is_number()) return v.get<double>();
    if (!v.is_string()) return std::nullopt;
    const std::string text = v.get<std::string>();
    double total = 0;
    size_t at = 0;
    const bool negative = text.starts_with("-");
    if (negative) at = 1;
    while (at < text.size()) {
        size_t used = 0;
        double number = 0;
        try {
            number = std::stod(text.substr(at), &used);
        } catch (const std::exception&) {
            return std::nullopt;
        }
        at += used;
        std::string unit;
        while (at < text.size() && std::isalpha(static_cast<unsigned char>(text[at]))) unit += text[at++];
        const double scale = unit.empty() || unit == "s" ? 1
                             : unit == "m"               ? 60
                             : unit == "h"               ? 3600
                             : unit == "ms"              ? 1e-3
                             : unit == "us"              ? 1e-6
                             : unit == "ns"              ? 1e-9
                                                         : -1;
        if (scale < 0) return std::nullopt;
        total += number * scale;
    }
    return negative ? -total : total;
}

std::string tagged(const std::string& name) {
    const size_t slash = name.rfind('/');
    return name.find(':', slash == std::string::npos ? 0 : slash) != std::string::npos ? name : name + ":latest";
}

std::string timestamp_in(double seconds) {
    const std::time_t t = std::time(nullptr) + static_cast<std::time_t>(seconds);
    std::tm utc{};
    gmtime_r(&t, &utc);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return text;
}

json openai_entry(const ModelStatus& m) {
    json meta = {{"loaded", m.loaded}, {"size", m.bytes}, {"in_flight", m.in_flight}};
    if (m.loaded) meta["n_ctx"] = m.n_ctx;
    if (!m.error.empty()) meta["error"] = without_paths(m.error);  // as a 5xx shows it
    if (!m.preset_model.empty()) meta["preset"] = {{"model", m.preset_model}};
    if (!m.shares_weights_with.empty()) meta["shares_weights_with"] = m.shares_weights_with;
    const std::string state = !m.error.empty() ? "failed" : m.loaded ? "loaded" : "unloaded";
    return {
        {"id", m.name}, {"object", "model"}, {"created", 0}, {"owned_by", "kvstash"}, {"status", {{"value", state}}},
        {"meta", meta}};
}

json ollama_entry(const ModelStatus& m) {
    const bool gguf = m.path.ends_with(".gguf");
    return {{"name", tagged(m.name)},
            {"model", tagged(m.name)},
            {"modified_at", ollama_timestamp()},
            {"size", m.bytes},
            {"digest", ""},
            {"details",
             {{"parent_model", m.preset_model.empty() ? "" : tagged(m.preset_model)},
              {"format", gguf ? "gguf" : "safetensors"},
              {"family", ""},
              {"families", json::array()}}}};
}

// The request as the preset it names makes it (the preset's defaults and system prompt in its body), or none
// (a plain model, or no JSON object body: the route answers that).
std::optional<httplib::Request> preset_request(const ModelRegistry& registry, const httplib::Request& req) {
    const json body = body_object(req);
    if (!body.is_object()) return std::nullopt;
    const auto preset = registry.preset_of(requested_model(req, body));
    if (!preset) return std::nullopt;
    httplib::Request copy = req;
    copy.body = apply_preset(*preset, body, req.path).dump();
    return copy;
}

// Keeps `lease` until the response's content provider (a stream) is done with the model.
void hold_until_written(httplib::Response& res, std::shared_ptr<LoadedModel> lease) {
    if (!res.content_provider_) return;
    auto release = std::move(res.content_provider_resource_releaser_);
    res.content_provider_resource_releaser_ = [release = std::move(release), lease = std::move(lease)](bool success) {
        if (release) release(success);
    };
}

}  // namespace

void register_registry_routes(httplib::Server& http, ServerContext& server, ModelRegistry& registry) {
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) { send_json(res, {{"status", "ok"}}); });
    http.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
        send_json(res, {{"version", KVSTASH_VERSION}});
    });
    http.Get("/metrics", [&server](const httplib::Request&, httplib::Response& res) {
        // Each model's scheduler counts into the server's metrics; cache and state totals are per model.
        res.set_content(server.metrics.render(PrefixCacheStats{}, StateStoreTotals{}), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [&registry](const httplib::Request&, httplib::Response& res) {
        json data = json::array();
        for (const ModelStatus& m : registry.status()) data.push_back(openai_entry(m));
        send_json(res, {{"object", "list"}, {"data", data}});
    });
    http.Get("/api/tags", [&registry](const httplib::Request&, httplib::Response& res) {
        json models = json::array();
        for (const ModelStatus& m : registry.status()) models.push_back(ollama_entry(m));
        send_json(res, {{"models", models}});
    });
    http.Get("/api/ps", [&registry](const httplib::Request&, httplib::Response& res) {
        json models = json::array();
        for (const ModelStatus& m : registry.status()) {
            if (!m.loaded) continue;
            json entry = ollama_entry(m);
            entry.erase("modified_at");
            entry["expires_at"] = m.expires_in_s ? timestamp_in(*m.expires_in_s) : "9999-12-31T23:59:59Z";
            entry["size_vram"] = 0;
            entry["context_length"] = m.n_ctx;
            // Weights another listed entry holds are counted there: the sizes add up to what is loaded.
            if (!m.shares_weights_with.empty()) {
                entry["size"] = 0;
                entry["shares_weights_with"] = tagged(m.shares_weights_with);
            }
            models.push_back(entry);
        }
        send_json(res, {{"models", models}});
    });

    // The routes' shape (method, pattern, order) from a context that serves nothing: registration only
    // captures the context, it never reads it.
    static ServerContext shape_context;
    RouteTable shape;
    register_model_routes(shape, shape_context);
    const double default_keep_alive = server.options.keep_alive_s;
    for (size_t i = 0; i < shape.routes().size(); ++i) {
        const RouteTable::Route& route = shape.routes()[i];
        // Finds the model, runs its own handler of route i, and keeps the model until the response is out.
        const auto lease_for = [&registry, default_keep_alive](const httplib::Request& req) {
            const json body = body_object(req);
            const std::string name = requested_model(req, body);
            std::shared_ptr<LoadedModel> lease = registry.acquire(name);
            // Each request sets how long its model stays loaded after it: Ollama's keep_alive, else --keep-alive.
            const auto keep_alive = is_ollama_path(req.path) ? keep_alive_seconds(body) : std::nullopt;
            if (const auto resolved = registry.resolve(name)) {
                registry.set_keep_alive(*resolved, keep_alive.value_or(default_keep_alive));
            }
            return lease;
        };
        if (std::holds_alternative<RouteTable::ReadingHandler>(route.handler)) {
            http.Put(route.pattern, [i, lease_for](const httplib::Request& req, httplib::Response& res,
                                                   const httplib::ContentReader& reader) {
                try {
                    auto lease = lease_for(req);
                    std::get<RouteTable::ReadingHandler>(lease->routes.routes()[i].handler)(req, res, reader);
                    hold_until_written(res, std::move(lease));
                } catch (const ApiError& e) {
                    send_route_error(req, res, e);
                }
            });
            continue;
        }
        const auto dispatch = [i, lease_for, &registry](const httplib::Request& req, httplib::Response& res) {
            try {
                auto lease = lease_for(req);
                const auto& handler = std::get<RouteTable::Handler>(lease->routes.routes()[i].handler);
                if (const auto with_preset = preset_request(registry, req)) {
                    handler(*with_preset, res);
                } else {
                    handler(req, res);
                }
                hold_until_written(res, std::move(lease));
            } catch (const ApiError& e) {
                send_route_error(req, res, e);
            }
        };
        if (route.method == "GET") http.Get(route.pattern, dispatch);
        if (route.method == "POST") http.Post(route.pattern, dispatch);
        if (route.method == "DELETE") http.Delete(route.pattern, dispatch);
    }
}

}  // namespace kvstash::server
