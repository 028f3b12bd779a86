// The routes of one served model, collected before they reach the HTTP server: with one model they are
// registered on it as they are (HttpServer), with several (--models, repeated -m) every model gets its own
// table, bound to its own ServerContext, and the server registers one dispatcher per entry that picks the
// table of the model a request names (server/model_routes.cpp). Entries keep their registration order, so
// entry i of every model's table is the same method and pattern.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <httplib.h>

namespace kvstash::server {

class RouteTable {
public:
    using Handler = httplib::Server::Handler;
    using ReadingHandler = httplib::Server::HandlerWithContentReader;  // reads its body itself (uploads)

    struct Route {
        std::string method;  // GET, POST, PUT or DELETE
        std::string pattern;
        std::variant<Handler, ReadingHandler> handler;
    };

    RouteTable& Get(const std::string& pattern, Handler h) { return add("GET", pattern, std::move(h)); }
    RouteTable& Post(const std::string& pattern, Handler h) { return add("POST", pattern, std::move(h)); }
    RouteTable& Delete(const std::string& pattern, Handler h) { return add("DELETE", pattern, std::move(h)); }
    RouteTable& Put(const std::string& pattern, ReadingHandler h) {
        routes_.push_back({"PUT", pattern, std::move(h)});
        return *this;
    }

    const std::vector<Route>& routes() const { return routes_; }

private:
    RouteTable& add(const char* method, const std::string& pattern, Handler h) {
        routes_.push_back({method, pattern, std::move(h)});
        return *this;
    }
    std::vector<Route> routes_;
};

}  // namespace kvstash::server
