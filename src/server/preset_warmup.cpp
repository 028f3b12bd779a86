#include "server/preset_warmup.h"

#include <nlohmann/json.hpp>

using nlohmann::json;

namespace kvstash::server {

std::string warm_preset(LoadedModel& loaded, const Preset& preset) {
    if (preset.system.empty()) return {};
    for (const RouteTable::Route& route : loaded.routes.routes()) {
        if (route.method != "POST" || route.pattern != "/v1/chat/completions") continue;
        httplib::Request req;
        req.method = "POST";
        req.path = route.pattern;
        req.set_header("Content-Type", "application/json");
        req.body = json{
            {"messages", json::array({json{{"role", "system"}, {"content", preset.system}}})},
            {"max_tokens", 1},
            {"temperature",
             0}}.dump();
        httplib::Response res;
        std::get<RouteTable::Handler>(route.handler)(req, res);
        if (res.status == 200) return {};
        return "status " + std::to_string(res.status) + ": " + res.body;
    }
    return "the model has no chat route";
}

}  // namespace kvstash::server
