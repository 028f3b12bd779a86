// `kvstash serve`: the HTTP front door (cpp-httplib). Handler threads parse and validate requests and
// wait on a per-request channel; only the scheduler thread touches the Evaluator.
//
//   kvstash::server::HttpServer server(kvstash::Model::load(path), options);
//   (or HttpServer(sources, registry_options, loader, options) for several models, named by requests)
//   int port = server.bind();   // options.port, or any free port for 0
//   server.run();               // until stop() (from a signal handler thread, for example)
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "kvstash/model.h"
#include "server/model_registry.h"
#include "server/server_options.h"

namespace httplib {
class Server;
}

namespace kvstash::server {

struct ServerContext;

class HttpServer {
public:
    // Starts the scheduler thread. Throws Error for unusable options (state directory, ...).
    HttpServer(std::shared_ptr<const Model> model, ServerOptions options);
    // Several models (docs/models.md): each loaded by `load` on the first request naming it, with its own
    // scheduler, prefix cache and named states (under --state-dir/NAME); unloaded when idle or for room.
    using ModelLoader = std::function<std::shared_ptr<const Model>(const ModelSource&)>;
    HttpServer(std::vector<ModelSource> sources, RegistryOptions registry_options, ModelLoader load,
               ServerOptions options);
    ~HttpServer();

    // Throws Error(io) when the address cannot be bound. Returns the port.
    int bind();
    void run();
    void stop();

private:
    void configure(const ServerOptions& options);  // limits, timeouts, CORS, logging, error shapes

    std::unique_ptr<ServerContext> ctx_;       // several models: the options and metrics only (no model)
    std::unique_ptr<ModelRegistry> registry_;  // several models only
    std::unique_ptr<httplib::Server> http_;
    int listen_socket_ = -1;  // set by the socket-options callback when bind() creates it
};

}  // namespace kvstash::server
