// `kvstash serve`: the HTTP front door (cpp-httplib). Handler threads parse and validate requests and
// wait on a per-request channel; only the scheduler thread touches the Evaluator.
//
//   kvstash::server::HttpServer server(kvstash::Model::load(path), options);
//   int port = server.bind();   // options.port, or any free port for 0
//   server.run();               // until stop() (from a signal handler thread, for example)
#pragma once

#include <memory>

#include "kvstash/model.h"
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
    ~HttpServer();

    // Throws Error(io) when the address cannot be bound. Returns the port.
    int bind();
    void run();
    void stop();

private:
    std::unique_ptr<ServerContext> ctx_;
    std::unique_ptr<httplib::Server> http_;
    int listen_socket_ = -1;  // set by the socket-options callback when bind() creates it
};

}  // namespace kvstash::server
