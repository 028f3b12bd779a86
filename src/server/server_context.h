// What every route handler needs: the model, the scheduler that owns evaluation, the named states and
// the counters. Built once by HttpServer; handlers only read the pointers.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kvstash/chat.h"
#include "kvstash/model.h"
#include "server/metrics.h"
#include "server/named_states.h"
#include "server/scheduler.h"
#include "server/server_options.h"
#include "server/state_store.h"  // the default NamedStates (tests build it directly)

namespace kvstash::server {

struct ServerContext {
    std::shared_ptr<const Model> model;
    ServerOptions options;
    std::string model_id;                       // the model file's name without .gguf
    std::optional<ChatTemplate> chat_template;  // none: /v1/chat/completions answers 400 with why
    std::string chat_template_error;
    Metrics metrics;
    std::unique_ptr<NamedStates> states;   // StateStore, or RedisStateStore with --state-store
    std::unique_ptr<Scheduler> scheduler;  // last: its thread uses the members above
};

}  // namespace kvstash::server
